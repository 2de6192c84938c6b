#version 460
// SUM_ROWS: one workgroup per row, the sum of its F32 values (read through their strides) into
// the contiguous result. Partial sums per invocation, then a workgroup reduction: not the CPU's
// f64 left-to-right sum, but as close as f32 gets for the router's short rows.
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, d;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint ne0, ne1, ne2, ne3;
} pc;

void main() {
  const uint row = flat_group();
  if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
  const uint64_t src = row_address(pc.a, row, pc.ne1, pc.ne2, pc.a_nb1, pc.a_nb2, pc.a_nb3);
  float s = 0.0;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    s += load_f32(src + uint64_t(k) * pc.a_nb0);
  }
  s = workgroup_sum(s);
  if (gl_LocalInvocationID.x == 0u) F32s(pc.d).v[row] = s;
}
