#version 460
// GET_ROWS: one workgroup per result row dst[:, i, j2, j3] = f32(a[:, idx[i, j2, j3], j2, j3]).
// An index outside [0, a_ne1) is reported to the error slot and its row written as zeros.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, idx, d, err;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint ne0, nr, ne2, ne3;
  uint idx_nb0, idx_nb1, idx_nb2, a_ne1;
  uint a_type, tag;
} pc;

void main() {
  const uint row = flat_group();
  if (row >= pc.nr * pc.ne2 * pc.ne3) return;
  const uint i = row % pc.nr;
  const uint j2 = (row / pc.nr) % pc.ne2;
  const uint j3 = row / (pc.nr * pc.ne2);
  const int r = I32s(pc.idx + uint64_t(i) * pc.idx_nb0 + uint64_t(j2) * pc.idx_nb1 +
                     uint64_t(j3) * pc.idx_nb2).v[0];
  const uint64_t out_row = pc.d + uint64_t(row) * pc.ne0 * 4u;
  if (r < 0 || uint(r) >= pc.a_ne1) {
    if (gl_LocalInvocationID.x == 0u) report_error(pc.err, pc.tag, r, int(pc.a_ne1));
    for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
      F32s(out_row).v[k] = 0.0;
    }
    return;
  }
  const uint64_t src =
      pc.a + uint64_t(r) * pc.a_nb1 + uint64_t(j2) * pc.a_nb2 + uint64_t(j3) * pc.a_nb3;
  if (is_quant(pc.a_type)) {  // a unit of 32 per invocation: each is decoded once.
    for (uint u = gl_LocalInvocationID.x; u < pc.ne0 / 32u; u += gl_WorkGroupSize.x) {
      const WUnit wu = load_wunit(pc.a_type, src, u);
      [[unroll]] for (uint j = 0u; j < 32u; ++j) {
        F32s(out_row).v[32u * u + j] = wunit_elem(pc.a_type, wu, j);
      }
    }
    return;
  }
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    F32s(out_row).v[k] = load_plain(pc.a_type, src + uint64_t(k) * pc.a_nb0);
  }
}
