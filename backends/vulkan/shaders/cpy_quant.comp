#version 460
// CPY into a quantized type: one invocation per destination block. Both sides have the same
// ne[0] and rows map in order (docs/ops.md); a's elements are read through its strides (any
// type), d's rows are contiguous blocks. Same-type quantized copies move the bytes.
#include "common.glsl"
#include "quantize.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, d;
  uint ne0, a_ne1, a_ne2, a_ne3;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint d_ne1, d_ne2, d_nb1, d_nb2;
  uint d_nb3, a_type, d_type, n_blocks;
} pc;

void main() {
  const uint blk = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (blk >= pc.n_blocks) return;
  const uint bs = block_size(pc.d_type);
  const uint per_row = pc.ne0 / bs;
  const uint row = blk / per_row, j = blk % per_row;
  uint r = row;
  const uint a1 = r % pc.a_ne1;
  r /= pc.a_ne1;
  const uint a2 = r % pc.a_ne2;
  const uint a3 = r / pc.a_ne2;
  r = row;
  const uint d1 = r % pc.d_ne1;
  r /= pc.d_ne1;
  const uint d2 = r % pc.d_ne2;
  const uint d3 = r / pc.d_ne2;
  const uint64_t src_row =
      pc.a + uint64_t(a1) * pc.a_nb1 + uint64_t(a2) * pc.a_nb2 + uint64_t(a3) * pc.a_nb3;
  const uint64_t dst = pc.d + uint64_t(d1) * pc.d_nb1 + uint64_t(d2) * pc.d_nb2 +
                       uint64_t(d3) * pc.d_nb3 + uint64_t(j) * block_bytes(pc.d_type);
  if (pc.a_type == pc.d_type) {
    const uint64_t src = src_row + uint64_t(j) * block_bytes(pc.d_type);
    for (uint i = 0u; i < block_bytes(pc.d_type); ++i) U8s(dst + i).v[0] = U8s(src + i).v[0];
    return;
  }
  for (uint i = 0u; i < bs; ++i) qx[i] = load_elem(pc.a_type, src_row, j * bs + i, pc.a_nb0);
  quantize_block(pc.d_type, dst);
}
