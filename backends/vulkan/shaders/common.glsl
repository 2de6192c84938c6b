// Shared by every kernel: buffer-device-address views of memory, tensor element types (the
// DType ids of core/dtype.h), exact f16/bf16 conversions, flat workgroup ids, and the decoding
// of quantized types (dequant.glsl).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32s { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32s { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16s { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8s { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer I8s { int8_t v[]; };
// The run-time error slot (ErrorSlot in vk_recorder.h).
layout(buffer_reference, std430, buffer_reference_align = 4) buffer ErrorSlot {
  uint tag;
  int value;
  int limit;
  uint spare;
};

const uint T_F32 = 0;
const uint T_F16 = 1;
const uint T_Q4_0 = 2;
const uint T_Q8_0 = 8;
const uint T_Q4_K = 12;
const uint T_Q6_K = 14;
const uint T_I32 = 26;
const uint T_BF16 = 30;

// The first workgroup-linear id of a 1-D dispatch spread over x and y (Recorder::Dispatch1D).
uint flat_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

// The address of row `row` (rows counted dim 1 fastest) of a tensor at `base` with ne1, ne2
// rows per dims 1 and 2 and byte strides nb1..nb3.
uint64_t row_address(uint64_t base, uint row, uint ne1, uint ne2, uint nb1, uint nb2, uint nb3) {
  const uint i1 = row % ne1, i2 = (row / ne1) % ne2, i3 = row / (ne1 * ne2);
  return base + uint64_t(i1) * nb1 + uint64_t(i2) * nb2 + uint64_t(i3) * nb3;
}

float f16_to_f32(uint h) { return unpackHalf2x16(h).x; }

// Round to nearest even, NaN -> canonical quiet NaN with its sign, as core/fp16.h.
uint f32_to_f16(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to infinity.
  if (ax >= 0x38800000u) {                       // a normal half.
    uint r = ax - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | (r >> 13);
  }
  if (ax <= 0x33000000u) return sign;  // at most 2^-25: rounds to zero.
  const uint e = ax >> 23;
  const uint m = (ax & 0x7fffffu) | 0x800000u;
  const uint shift = 126u - e;
  uint q = m >> shift;
  const uint rem = m & ((1u << shift) - 1u);
  const uint half_unit = 1u << (shift - 1u);
  if (rem > half_unit || (rem == half_unit && (q & 1u) == 1u)) q += 1u;
  return sign | q;
}

float bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }

uint f32_to_bf16(float f) {
  const uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 64u) & 0xffffu;
  return ((u + (0x7fffu + ((u >> 16) & 1u))) >> 16) & 0xffffu;
}

// a / b correctly rounded. OpFDiv may be evaluated through an approximate reciprocal (Vulkan
// allows 2.5 ulp), enough to move a quantizer's values across rounding boundaries and away
// from the CPU's; one FMA refinement of the reciprocal and one of the quotient (Markstein)
// give the rounded quotient. b must be finite and nonzero.
float div_rn(float a, float b) {
  precise float r = 1.0 / b;
  precise float e = fma(-b, r, 1.0);
  precise float r1 = fma(r, e, r);
  precise float q = a * r1;
  precise float rem = fma(-b, q, a);
  precise float q1 = fma(rem, r1, q);
  return q1;
}

// ggml's nearest_int: round to nearest even through the float's mantissa.
int nearest_int(float v) {
  precise float shifted = v + 12582912.0;
  return (floatBitsToInt(shifted) & 0x007fffff) - 0x00400000;
}

// C's roundf: halves away from zero.
float round_away(float v) {
  const float t = trunc(v);
  return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

// A float's significand as a 24-bit integer with its top bit set (subnormals normalized) and
// the biased exponent that goes with it: x = m * 2^(e - 150). x finite and nonzero.
uint significand(uint bits, out int e) {
  const uint field = (bits >> 23) & 0xffu;
  uint m = bits & 0x7fffffu;
  if (field != 0u) {
    e = int(field);
    return m | 0x800000u;
  }
  const int s = 23 - findMSB(m);
  e = 1 - s;
  return m << uint(s);
}

// a / b correctly rounded (DIV, docs/ops.md: IEEE division). Vulkan lets OpFDiv be 2.5 ulp
// off and fma be a rounded multiply and add (lavapipe's is: div_rn's refinement then misses
// about one quotient in ten), so the quotient of the significands is taken in 64-bit integers
// and rounded to nearest even by its remainder. Special operands (infinities, zeros, NaN) and
// quotients outside the normal range take the plain division, exact there but for the
// rounding of a subnormal quotient.
float div_ieee(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  const uint xa = ua & 0x7fffffffu, xb = ub & 0x7fffffffu;
  if (xa == 0u || xb == 0u || xa >= 0x7f800000u || xb >= 0x7f800000u) return a / b;
  int ea, eb;
  const uint ma = significand(ua, ea), mb = significand(ub, eb);
  // ma / mb is in (1/2, 2): 2^26 ma / mb has 26 or 27 bits, 2 or 3 beyond the 24 kept.
  const uint64_t num = uint64_t(ma) << 26;
  const uint q = uint(num / uint64_t(mb));
  const bool inexact = uint64_t(q) * uint64_t(mb) != num;
  uint shift = q >= (1u << 26) ? 3u : 2u;
  uint m = q >> shift;
  const uint rest = q & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (inexact || (m & 1u) == 1u))) ++m;
  if (m == (1u << 24)) {
    m >>= 1;
    ++shift;
  }
  const int biased = ea - eb + int(shift) - 3 + 127;  // of m * 2^(shift - 26) * 2^(ea - eb).
  if (biased < 1 || biased > 254) return a / b;
  return uintBitsToFloat(((ua ^ ub) & 0x80000000u) | (uint(biased) << 23) | (m & 0x7fffffu));
}

// Loads of single elements at a byte address.
float load_f32(uint64_t a) { return F32s(a).v[0]; }
float load_f16(uint64_t a) { return f16_to_f32(uint(U16s(a).v[0])); }
uint load_u16(uint64_t a) { return uint(U16s(a).v[0]); }
uint load_u8(uint64_t a) { return uint(U8s(a).v[0]); }
int load_i8(uint64_t a) { return int(I8s(a).v[0]); }

// A plain element (F32, F16, BF16, I32) as f32.
float load_plain(uint type, uint64_t a) {
  switch (type) {
    case T_F32: return F32s(a).v[0];
    case T_F16: return f16_to_f32(uint(U16s(a).v[0]));
    case T_BF16: return bf16_to_f32(uint(U16s(a).v[0]));
    default: return float(I32s(a).v[0]);
  }
}

void store_plain(uint type, uint64_t a, float x) {
  switch (type) {
    case T_F32: F32s(a).v[0] = x; break;
    case T_F16: U16s(a).v[0] = uint16_t(f32_to_f16(x)); break;
    case T_BF16: U16s(a).v[0] = uint16_t(f32_to_bf16(x)); break;
    default: I32s(a).v[0] = int(roundEven(x)); break;
  }
}

#include "dequant.glsl"

// Reports a run-time error once (the first one wins).
void report_error(uint64_t slot, uint tag, int value, int limit) {
  if (atomicCompSwap(ErrorSlot(slot).tag, 0u, tag) == 0u) {
    ErrorSlot(slot).value = value;
    ErrorSlot(slot).limit = limit;
  }
}
