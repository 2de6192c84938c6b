#version 460
// SET_ROWS into a quantized type: one workgroup per source row b[:, i, j2, j3], quantized
// block by block (one block per invocation) with the reference quantizer into
// d[:, idx[i, j2 % c1, j3 % c2], j2, j3]. An index outside [0, d_ne1) is reported to the error
// slot and the row skipped.
#include "common.glsl"
#include "quantize.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t d, b, idx, err;
  uint d_nb0, d_nb1, d_nb2, d_nb3;
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint ne0, nr, ne2, ne3;
  uint idx_nb0, idx_nb1, idx_nb2, c1;
  uint c2, d_ne1, d_type, tag;
} pc;

void main() {
  const uint row = flat_group();
  if (row >= pc.nr * pc.ne2 * pc.ne3) return;
  const uint i = row % pc.nr;
  const uint j2 = (row / pc.nr) % pc.ne2;
  const uint j3 = row / (pc.nr * pc.ne2);
  const int r = I32s(pc.idx + uint64_t(i) * pc.idx_nb0 + uint64_t(j2 % pc.c1) * pc.idx_nb1 +
                     uint64_t(j3 % pc.c2) * pc.idx_nb2).v[0];
  if (r < 0 || uint(r) >= pc.d_ne1) {
    if (gl_LocalInvocationID.x == 0u) report_error(pc.err, pc.tag, r, int(pc.d_ne1));
    return;
  }
  const uint64_t src =
      pc.b + uint64_t(i) * pc.b_nb1 + uint64_t(j2) * pc.b_nb2 + uint64_t(j3) * pc.b_nb3;
  const uint64_t dst =
      pc.d + uint64_t(r) * pc.d_nb1 + uint64_t(j2) * pc.d_nb2 + uint64_t(j3) * pc.d_nb3;
  const uint bs = block_size(pc.d_type);
  for (uint blk = gl_LocalInvocationID.x; blk < pc.ne0 / bs; blk += gl_WorkGroupSize.x) {
    for (uint k = 0u; k < bs; ++k) qx[k] = load_f32(src + uint64_t(blk * bs + k) * pc.b_nb0);
    quantize_block(pc.d_type, dst + uint64_t(blk) * block_bytes(pc.d_type));
  }
}
