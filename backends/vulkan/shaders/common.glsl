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
