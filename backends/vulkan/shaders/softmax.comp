#version 460
// SOFT_MAX: one workgroup per row, dst = softmax(a * scale + mask). -inf entries get 0, a row
// that is all -inf gives zeros. With sinks (gpt-oss), head i2's sink logit joins the maximum
// and the denominator only.
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, m, d, sinks;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint ne0, ne1, ne2, ne3;
  uint m_nb0, m_nb1, m_nb2, m_nb3;
  uint m_ne2, m_ne3, m_type;
  float scale;
} pc;

float value(uint64_t src, uint64_t mrow, uint k) {
  float v = load_f32(src + uint64_t(k) * pc.a_nb0) * pc.scale;
  if (pc.m != 0ul) v += load_plain(pc.m_type, mrow + uint64_t(k) * pc.m_nb0);
  return v;
}

void main() {
  const uint row = flat_group();
  if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
  const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
  const uint64_t src =
      pc.a + uint64_t(i1) * pc.a_nb1 + uint64_t(i2) * pc.a_nb2 + uint64_t(i3) * pc.a_nb3;
  uint64_t mrow = 0ul;
  if (pc.m != 0ul) {
    mrow = pc.m + uint64_t(i1) * pc.m_nb1 + uint64_t(i2 % pc.m_ne2) * pc.m_nb2 +
           uint64_t(i3 % pc.m_ne3) * pc.m_nb3;
  }
  float mx = uintBitsToFloat(0xff800000u);  // -inf
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    mx = max(mx, value(src, mrow, k));
  }
  mx = workgroup_max(mx);
  const uint64_t dst = pc.d + uint64_t(row) * pc.ne0 * 4u;
  if (isinf(mx) && mx < 0.0) {
    for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
      F32s(dst).v[k] = 0.0;
    }
    return;
  }
  float sink_exp = 0.0;
  if (pc.sinks != 0ul) {
    const float sink = F32s(pc.sinks).v[i2];
    mx = max(mx, sink);
    sink_exp = exp(sink - mx);
  }
  float s = 0.0;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    const float e = exp(value(src, mrow, k) - mx);
    F32s(dst).v[k] = e;
    s += e;
  }
  s = workgroup_sum(s) + sink_exp;
  const float inv = 1.0 / s;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    F32s(dst).v[k] *= inv;
  }
}
