#version 460
// RMS_NORM: one workgroup per row, dst = a / sqrt(mean(a^2) + eps); when w is given (an
// RMS_NORM followed by a MUL with the norm's weight row, fused: vk_fusion.h) also dw = dst * w.
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, d, w, dw;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint ne0, ne1, ne2, ne3;
  float eps;
} pc;

void main() {
  const uint row = flat_group();
  if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
  const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
  const uint64_t src =
      pc.a + uint64_t(i1) * pc.a_nb1 + uint64_t(i2) * pc.a_nb2 + uint64_t(i3) * pc.a_nb3;
  float s = 0.0;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    const float x = load_f32(src + uint64_t(k) * pc.a_nb0);
    s += x * x;
  }
  s = workgroup_sum(s);
  const float scale = 1.0 / sqrt(s / float(pc.ne0) + pc.eps);
  const uint64_t dst = pc.d + uint64_t(row) * pc.ne0 * 4u;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    const float y = load_f32(src + uint64_t(k) * pc.a_nb0) * scale;
    F32s(dst).v[k] = y;  // first: the MUL's result may take the norm's place.
    if (pc.w != 0ul) F32s(pc.dw + uint64_t(row) * pc.ne0 * 4u).v[k] = y * F32s(pc.w).v[k];
  }
}
