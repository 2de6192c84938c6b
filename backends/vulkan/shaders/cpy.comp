#version 460
// CPY/CONT/dequantization: element k (logical order) of a, of any type, becomes element k of
// d, of a plain type (F32, F16, BF16, I32). One invocation per element.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, d;
  uint a_ne0, a_ne1, a_ne2, a_ne3;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint d_ne0, d_ne1, d_ne2, d_ne3;
  uint d_nb0, d_nb1, d_nb2, d_nb3;
  uint a_type, d_type, n;
} pc;

void main() {
  const uint k = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (k >= pc.n) return;
  uint r = k / pc.a_ne0;
  const uint a0 = k % pc.a_ne0;
  const uint a1 = r % pc.a_ne1;
  r /= pc.a_ne1;
  const uint a2 = r % pc.a_ne2;
  const uint a3 = r / pc.a_ne2;
  const uint64_t row =
      pc.a + uint64_t(a1) * pc.a_nb1 + uint64_t(a2) * pc.a_nb2 + uint64_t(a3) * pc.a_nb3;
  const float v = load_elem(pc.a_type, row, a0, pc.a_nb0);
  r = k / pc.d_ne0;
  const uint d0 = k % pc.d_ne0;
  const uint d1 = r % pc.d_ne1;
  r /= pc.d_ne1;
  const uint d2 = r % pc.d_ne2;
  const uint d3 = r / pc.d_ne2;
  const uint64_t at = pc.d + uint64_t(d0) * pc.d_nb0 + uint64_t(d1) * pc.d_nb1 +
                      uint64_t(d2) * pc.d_nb2 + uint64_t(d3) * pc.d_nb3;
  if (pc.a_type == T_I32 && pc.d_type == T_I32) {
    I32s(at).v[0] = I32s(row + uint64_t(a0) * pc.a_nb0).v[0];  // exact beyond 2^24.
  } else {
    store_plain(pc.d_type, at, v);
  }
}
