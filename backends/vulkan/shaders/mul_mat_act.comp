#version 460
// MUL_MAT activations, prepared once per node: b (f32, any strides) becomes contiguous f32
// rows [K, ne1, ne2, ne3], rounded through the CPU's activation format of the weight type:
// FORMAT 1 = Q8_0 blocks of 32 (Q4_0/Q8_0 weights), 2 = Q8_K blocks of 256 (Q4_K/Q6_K),
// 0 = plain copy (float weights whose activations are strided). One invocation per block
// (per element for the plain copy).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t b, d;
  uint K, ne1, ne2, ne3;
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint format, n;
} pc;

int nearest_int(float v) {
  precise float shifted = v + 12582912.0;
  return (floatBitsToInt(shifted) & 0x007fffff) - 0x00400000;
}

float round_away(float v) {
  const float t = trunc(v);
  return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

void main() {
  const uint item = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (item >= pc.n) return;
  const uint bs = pc.format == 0u ? 1u : (pc.format == 1u ? 32u : 256u);
  const uint per_row = pc.K / bs;
  const uint row = item / per_row, k0 = (item % per_row) * bs;
  const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
  const uint64_t src =
      pc.b + uint64_t(i1) * pc.b_nb1 + uint64_t(i2) * pc.b_nb2 + uint64_t(i3) * pc.b_nb3;
  const uint64_t dst = pc.d + (uint64_t(row) * pc.K + k0) * 4u;
  if (pc.format == 0u) {
    F32s(dst).v[0] = load_f32(src + uint64_t(k0) * pc.b_nb0);
    return;
  }
  if (pc.format == 1u) {  // QuantizeBlockQ8_0, then dequantized.
    float amax = 0.0;
    for (uint j = 0u; j < 32u; ++j) {
      const float x = load_f32(src + uint64_t(k0 + j) * pc.b_nb0);
      amax = amax > abs(x) ? amax : abs(x);
    }
    const float d = div_rn(amax, 127.0);
    const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    const float dh = f16_to_f32(f32_to_f16(d));
    for (uint j = 0u; j < 32u; ++j) {
      precise float v = load_f32(src + uint64_t(k0 + j) * pc.b_nb0) * id;
      const int q = (int(round_away(v)) << 24) >> 24;
      F32s(dst).v[j] = float(q) * dh;
    }
    return;
  }
  // QuantizeBlockQ8_K, then dequantized.
  float mx = 0.0, amax = 0.0;
  for (uint j = 0u; j < 256u; ++j) {
    const float x = load_f32(src + uint64_t(k0 + j) * pc.b_nb0);
    if (abs(x) > amax) {
      amax = abs(x);
      mx = x;
    }
  }
  if (amax == 0.0) {
    for (uint j = 0u; j < 256u; ++j) F32s(dst).v[j] = 0.0;
    return;
  }
  const float iscale = div_rn(-127.0, mx);
  const float d = div_rn(1.0, iscale);
  for (uint j = 0u; j < 256u; ++j) {
    precise float v = iscale * load_f32(src + uint64_t(k0 + j) * pc.b_nb0);
    F32s(dst).v[j] = d * float(min(127, nearest_int(v)));
  }
}
