#version 460
// MUL_MAT with few activation columns (decode) on GPUs: a workgroup computes ROWS weight rows
// for one activation column; its invocations share the rows' 32-weight units, and the partial
// sums are reduced with subgroup arithmetic, then across subgroups in shared memory.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "act_unit.glsl"
#include "mul_mat_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TYPE = 0;
layout(constant_id = 2) const uint ROWS = 4;

layout(push_constant) uniform PC {  // MatMulPC in vk_op_matmul.cc.
  uint64_t a, b, d;
  uint K, M, N, a_nb1;
  uint a_nb2, a_nb3, b_nb1, b_nb2;
  uint b_nb3, d_nb1, d_nb2, d_nb3;
  uint ne12, r2, r3;
} pc;

shared float partial_s[32 * 8];

void main() {
  const uint m0 = gl_WorkGroupID.x * ROWS;
  const uint n = gl_WorkGroupID.y;
  const uint i2 = gl_WorkGroupID.z % pc.ne12, i3 = gl_WorkGroupID.z / pc.ne12;
  const uint64_t arow0 = pc.a + uint64_t(i2 / pc.r2) * pc.a_nb2 + uint64_t(i3 / pc.r3) * pc.a_nb3;
  const uint64_t brow = pc.b + uint64_t(n) * pc.b_nb1 + uint64_t(i2) * pc.b_nb2 + uint64_t(i3) * pc.b_nb3;
  const uint units = (pc.K + 31u) / 32u;
  const uint rows = min(ROWS, pc.M - m0);
  float acc[ROWS];
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) acc[r] = 0.0;
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    if (r >= rows) break;
    const uint64_t arow = arow0 + uint64_t(m0 + r) * pc.a_nb1;
    for (uint u = gl_LocalInvocationID.x; u < units; u += gl_WorkGroupSize.x) {
      acc[r] += is_quant(TYPE) ? unit_dot_q(TYPE, arow, u, brow + uint64_t(u) * kActUnitBytes)
                               : unit_dot_f(TYPE, arow, u, brow + uint64_t(u) * 128u, pc.K);
    }
  }
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) acc[r] = subgroupAdd(acc[r]);
  const uint64_t dst_row = pc.d + uint64_t(n) * pc.d_nb1 + uint64_t(i2) * pc.d_nb2 + uint64_t(i3) * pc.d_nb3;
  if (gl_NumSubgroups == 1u) {
    if (gl_LocalInvocationID.x == 0u) {
      [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        if (r < rows) F32s(dst_row).v[m0 + r] = acc[r];
      }
    }
    return;
  }
  if (subgroupElect()) {
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) partial_s[r * 32u + gl_SubgroupID] = acc[r];
  }
  barrier();
  const uint r = gl_LocalInvocationID.x;
  if (r < rows) {
    float s = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) s += partial_s[r * 32u + g];
    F32s(dst_row).v[m0 + r] = s;
  }
}
