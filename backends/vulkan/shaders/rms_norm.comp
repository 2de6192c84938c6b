#version 460
// RMS_NORM: one workgroup per row, dst = a / sqrt(mean(a^2) + eps); when w is given (an
// RMS_NORM followed by a MUL with the norm's weight row, fused: vk_fusion.h) also dw = dst * w.
// When qformat is nonzero, the MUL_MAT that multiplies the result next wants its activations
// quantized (1: Q8_0 units, 2: Q8_K; quantize_act.glsl): the workgroup also writes them at q,
// so that the product needs no mul_mat_act dispatch.
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, d, w, dw;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint ne0, ne1, ne2, ne3;
  float eps;
  uint qformat;
  uint64_t q;
} pc;

uint64_t src;  // the row of a.
float scale;   // its 1 / rms.
// Value k of the result the product multiplies (dw, or dst without w), as main writes it.
float act_in(uint k) {
  precise float y = load_f32(src + uint64_t(k) * pc.a_nb0) * scale;
  if (pc.w == 0ul) return y;
  precise float v = y * F32s(pc.w).v[k];
  return v;
}
#include "quantize_act.glsl"

void main() {
  const uint row = flat_group();
  if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
  const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
  src = pc.a + uint64_t(i1) * pc.a_nb1 + uint64_t(i2) * pc.a_nb2 + uint64_t(i3) * pc.a_nb3;
  float s = 0.0;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    const float x = load_f32(src + uint64_t(k) * pc.a_nb0);
    s += x * x;
  }
  s = workgroup_sum(s);
  scale = 1.0 / sqrt(s / float(pc.ne0) + pc.eps);
  const uint64_t dst = pc.d + uint64_t(row) * pc.ne0 * 4u;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    precise float y = load_f32(src + uint64_t(k) * pc.a_nb0) * scale;
    F32s(dst).v[k] = y;  // first: the MUL's result may take the norm's place.
    if (pc.w != 0ul) {
      precise float v = y * F32s(pc.w).v[k];
      F32s(pc.dw + uint64_t(row) * pc.ne0 * 4u).v[k] = v;
    }
  }
  if (pc.qformat == 0u) return;
  const uint block = pc.qformat == 1u ? 32u : 256u;
  const uint64_t q_row = pc.q + uint64_t(row) * (pc.ne0 / 32u) * kActUnitBytes;
  for (uint k0 = gl_LocalInvocationID.x * block; k0 < pc.ne0; k0 += gl_WorkGroupSize.x * block) {
    if (pc.qformat == 1u) {
      quantize_act_q8_0(q_row, k0);
    } else {
      quantize_act_q8_k(q_row, k0);
    }
  }
}
