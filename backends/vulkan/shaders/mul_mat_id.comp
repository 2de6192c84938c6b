#version 460
// MUL_MAT_ID: dst[:, i, t] = experts[:, :, ids[i, t] - first] x b[:, i % nb1, t]. A workgroup
// computes ROWS rows of one (i, t) pair as mul_mat_vec does; an expert id outside
// [first, first + E) gets its rows written as zeros, and is reported to the error slot unless
// the experts are a range of a larger set (expert parallelism: another device has the others).
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "act_unit.glsl"
#include "mul_mat_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TYPE = 0;
layout(constant_id = 2) const uint ROWS = 4;

layout(push_constant) uniform PC {
  uint64_t a, b, d, ids, err;
  uint K, M, n_used, b_ne1;
  uint a_nb1, a_nb2, b_nb1, b_nb2;
  uint d_nb1, d_nb2, ids_nb0, ids_nb1;
  uint E, tag;
  int first;
  uint ranged;
} pc;

shared float partial_s[32 * 8];

void main() {
  const uint m0 = gl_WorkGroupID.x * ROWS;
  const uint i = gl_WorkGroupID.y % pc.n_used, tok = gl_WorkGroupID.y / pc.n_used;
  const int id = I32s(pc.ids + uint64_t(i) * pc.ids_nb0 + uint64_t(tok) * pc.ids_nb1).v[0];
  const int e = id - pc.first;
  const uint rows = min(ROWS, pc.M - m0);
  const uint64_t dst_row = pc.d + uint64_t(i) * pc.d_nb1 + uint64_t(tok) * pc.d_nb2;
  if (e < 0 || uint(e) >= pc.E) {
    if (pc.ranged == 0u && gl_LocalInvocationID.x == 0u && m0 == 0u) {
      report_error(pc.err, pc.tag, id, int(pc.E));
    }
    if (gl_LocalInvocationID.x < rows) F32s(dst_row).v[m0 + gl_LocalInvocationID.x] = 0.0;
    return;
  }
  const uint64_t arow0 = pc.a + uint64_t(e) * pc.a_nb2;
  const uint64_t brow = pc.b + uint64_t(i % pc.b_ne1) * pc.b_nb1 + uint64_t(tok) * pc.b_nb2;
  const uint units = (pc.K + 31u) / 32u;
  float acc[ROWS];
  for (uint r = 0u; r < ROWS; ++r) acc[r] = 0.0;
  for (uint item = gl_LocalInvocationID.x; item < rows * units; item += gl_WorkGroupSize.x) {
    const uint r = item / units, u = item % units;
    const uint64_t arow = arow0 + uint64_t(m0 + r) * pc.a_nb1;
    const float p = is_quant(TYPE) ? unit_dot_q(TYPE, arow, u, brow + uint64_t(u) * kActUnitBytes)
                                   : unit_dot_f(TYPE, arow, u, brow + uint64_t(u) * 128u, pc.K);
    for (uint rr = 0u; rr < ROWS; ++rr) {
      if (rr == r) acc[rr] += p;
    }
  }
  for (uint r = 0u; r < ROWS; ++r) acc[r] = subgroupAdd(acc[r]);
  if (gl_NumSubgroups == 1u) {
    if (gl_LocalInvocationID.x < rows) {
      for (uint r = 0u; r < ROWS; ++r) {
        if (r == gl_LocalInvocationID.x) F32s(dst_row).v[m0 + r] = acc[r];
      }
    }
    return;
  }
  if (subgroupElect()) {
    for (uint r = 0u; r < ROWS; ++r) partial_s[r * 32u + gl_SubgroupID] = acc[r];
  }
  barrier();
  const uint r = gl_LocalInvocationID.x;
  if (r < rows) {
    float s = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) s += partial_s[r * 32u + g];
    F32s(dst_row).v[m0 + r] = s;
  }
}
