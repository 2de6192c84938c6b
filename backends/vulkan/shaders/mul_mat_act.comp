#version 460
// MUL_MAT activations, prepared once per node from b (f32, any strides):
//  FORMAT 0: contiguous f32 rows [K, ne1, ne2, ne3] (float weights whose b is strided);
//  FORMAT 1: Q8_0 units (Q4_0 and Q8_0 weights), the CPU's QuantizeBlockQ8_0 per 32 values;
//  FORMAT 2: Q8_K units (Q4_K and Q6_K weights), the CPU's QuantizeBlockQ8_K per 256 values.
// Quantized activations are packed per 32 values ("unit", act_unit.glsl): 32 int8 in 8 words,
// the scale as f32 and the sum of the 32 quants, so that the kernels load 10 words per 32
// products and compute the CPU's exact integer block sums. One invocation per 32 values
// (Q8_0), per 256 (Q8_K) or per value (FORMAT 0).
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "act_unit.glsl"

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

// Packs 32 quants q (each in [-128, 127]) with scale d into unit `u` of the row at `row`.
void store_unit(uint64_t row, uint u, int q[32], float d) {
  const uint64_t at = row + uint64_t(u) * kActUnitBytes;
  int sum = 0;
  [[unroll]] for (uint w = 0u; w < 8u; ++w) {
    const uint word = (uint(q[4u * w]) & 0xFFu) | ((uint(q[4u * w + 1u]) & 0xFFu) << 8) |
                      ((uint(q[4u * w + 2u]) & 0xFFu) << 16) | ((uint(q[4u * w + 3u]) & 0xFFu) << 24);
    U32s(at).v[w] = word;
    sum += q[4u * w] + q[4u * w + 1u] + q[4u * w + 2u] + q[4u * w + 3u];
  }
  F32s(at).v[8] = d;
  I32s(at).v[9] = sum;
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
  if (pc.format == 0u) {
    F32s(pc.d + (uint64_t(row) * pc.K + k0) * 4u).v[0] = load_f32(src + uint64_t(k0) * pc.b_nb0);
    return;
  }
  const uint64_t dst_row = pc.d + uint64_t(row) * (pc.K / 32u) * kActUnitBytes;
  if (pc.format == 1u) {  // QuantizeBlockQ8_0.
    float x[32];
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; ++j) {
      x[j] = load_f32(src + uint64_t(k0 + j) * pc.b_nb0);
      amax = amax > abs(x[j]) ? amax : abs(x[j]);
    }
    const float d = div_rn(amax, 127.0);
    const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    int q[32];
    [[unroll]] for (uint j = 0u; j < 32u; ++j) {
      precise float v = x[j] * id;
      q[j] = (int(round_away(v)) << 24) >> 24;
    }
    store_unit(dst_row, k0 / 32u, q, f16_to_f32(f32_to_f16(d)));
    return;
  }
  // QuantizeBlockQ8_K.
  float mx = 0.0, amax = 0.0;
  for (uint j = 0u; j < 256u; ++j) {
    const float x = load_f32(src + uint64_t(k0 + j) * pc.b_nb0);
    if (abs(x) > amax) {
      amax = abs(x);
      mx = x;
    }
  }
  const float iscale = amax == 0.0 ? 0.0 : div_rn(-127.0, mx);
  const float d = amax == 0.0 ? 0.0 : div_rn(1.0, iscale);
  for (uint u = 0u; u < 8u; ++u) {
    int q[32];
    [[unroll]] for (uint j = 0u; j < 32u; ++j) {
      precise float v = iscale * load_f32(src + uint64_t(k0 + 32u * u + j) * pc.b_nb0);
      q[j] = min(127, nearest_int(v));
    }
    store_unit(dst_row, k0 / 32u + u, q, d);
  }
}
