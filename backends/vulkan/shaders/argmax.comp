#version 460
// ARGMAX: one workgroup per row, the index of the largest value; the first one on ties, NaN
// never wins, a row of NaN gives 0.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, d;
  uint a_nb1, a_nb2, a_nb3, ne0;
  uint ne1, ne2, ne3;
} pc;

shared float best_v[256];
shared uint best_i[256];

// True when (v, i) beats (bv, bi): larger, or equal and earlier.
bool beats(float v, uint i, float bv, uint bi) {
  return bi == 0xffffffffu || v > bv || (v == bv && i < bi);
}

void main() {
  const uint row = flat_group();
  if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
  const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
  const uint64_t src =
      pc.a + uint64_t(i1) * pc.a_nb1 + uint64_t(i2) * pc.a_nb2 + uint64_t(i3) * pc.a_nb3;
  const uint t = gl_LocalInvocationID.x;
  float bv = 0.0;
  uint bi = 0xffffffffu;
  for (uint k = t; k < pc.ne0; k += gl_WorkGroupSize.x) {
    const float v = F32s(src).v[k];
    if (isnan(v)) continue;
    if (beats(v, k, bv, bi)) {
      bv = v;
      bi = k;
    }
  }
  best_v[t] = bv;
  best_i[t] = bi;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
    if (t < s && best_i[t + s] != 0xffffffffu && beats(best_v[t + s], best_i[t + s], best_v[t], best_i[t])) {
      best_v[t] = best_v[t + s];
      best_i[t] = best_i[t + s];
    }
    barrier();
  }
  if (t == 0u) I32s(pc.d).v[row] = best_i[0] == 0xffffffffu ? 0 : int(best_i[0]);
}
