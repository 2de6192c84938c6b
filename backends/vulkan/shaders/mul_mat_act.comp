#version 460
// MUL_MAT activations, prepared once per node from b (f32, any strides):
//  FORMAT 0: contiguous f32 rows [K, ne1, ne2, ne3] (float weights whose b is strided);
//  FORMAT 1: Q8_0 units (Q4_0 and Q8_0 weights), the CPU's QuantizeBlockQ8_0 per 32 values;
//  FORMAT 2: Q8_K units (Q4_K and Q6_K weights), the CPU's QuantizeBlockQ8_K per 256 values.
// Quantized activations are packed per 32 values ("unit", act_unit.glsl): 32 int8 in 8 words,
// the scale as f32 and the sum of the 32 quants, so that the kernels load 10 words per 32
// products and compute the CPU's exact integer block sums (quantize_act.glsl). One invocation
// per 32 values (Q8_0), per 256 (Q8_K) or per value (FORMAT 0).
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t b, d;
  uint K, ne1, ne2, ne3;
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint format, n;
} pc;

uint64_t src;  // the row of b being prepared.
float act_in(uint k) { return load_f32(src + uint64_t(k) * pc.b_nb0); }
#include "quantize_act.glsl"

void main() {
  const uint item = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (item >= pc.n) return;
  const uint bs = pc.format == 0u ? 1u : (pc.format == 1u ? 32u : 256u);
  const uint per_row = pc.K / bs;
  const uint row = item / per_row, k0 = (item % per_row) * bs;
  const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
  src = pc.b + uint64_t(i1) * pc.b_nb1 + uint64_t(i2) * pc.b_nb2 + uint64_t(i3) * pc.b_nb3;
  if (pc.format == 0u) {
    F32s(pc.d + (uint64_t(row) * pc.K + k0) * 4u).v[0] = act_in(k0);
    return;
  }
  const uint64_t dst_row = pc.d + uint64_t(row) * (pc.K / 32u) * kActUnitBytes;
  if (pc.format == 1u) {
    quantize_act_q8_0(dst_row, k0);
  } else {
    quantize_act_q8_k(dst_row, k0);
  }
}
