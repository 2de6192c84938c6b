#version 460
// ROPE (normal and neox pairs, freq factors, YaRN, partial rotation): one invocation per
// element pair of the contiguous result; dimensions from n_dims on are copied. The YaRN
// correction dims, log2(freq_base) and the output scale come from the host in double
// precision (core/ops.h); sin and cos are computed here to about one ulp (the built-ins may be
// much coarser).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, pos, ff, d;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint ne0, ne1, ne2, ne3;
  uint n_dims, neox, n;
  float log2_base, freq_scale, ext_factor, mscale;
  float corr_lo, corr_hi;
} pc;

const float kTwoPiHi = 6.28125;                       // 8 significant bits: k * hi is exact.
const float kTwoPiMid = 0.0019350051879882812;        // the next 12 bits.
const float kTwoPiLo = 3.0199159819502286e-07;        // the rest.

// sin and cos of x in [-pi, pi], Cephes' single-precision polynomials after reducing by pi/2.
void sin_cos(float x, out float s, out float c) {
  const float k = round(x * 0.63661977236758134);
  precise float r = ((x - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.54978995489188216e-8;
  const float r2 = r * r;
  const float sp = r + r * r2 * (-1.6666654611e-1 + r2 * (8.3321608736e-3 + r2 * -1.9515295891e-4));
  const float cp = 1.0 - 0.5 * r2 +
                   r2 * r2 * (4.166664568298827e-2 + r2 * (-1.388731625493765e-3 + r2 * 2.443315711809948e-5));
  const int q = int(k) & 3;
  if (q == 0) { s = sp; c = cp; }
  else if (q == 1) { s = cp; c = -sp; }
  else if (q == 2) { s = -sp; c = -cp; }
  else { s = -cp; c = sp; }
}

void main() {
  const uint idx = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (idx >= pc.n) return;
  const uint half_row = pc.ne0 / 2u;  // pairs (or pair-sized slots) per row.
  const uint slot = idx % half_row;
  const uint row = idx / half_row;
  const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
  const uint64_t src =
      pc.a + uint64_t(i1) * pc.a_nb1 + uint64_t(i2) * pc.a_nb2 + uint64_t(i3) * pc.a_nb3;
  const uint64_t dst = pc.d + uint64_t(row) * pc.ne0 * 4u;
  const uint n_pairs = pc.n_dims / 2u;
  if (slot >= n_pairs) {  // beyond the rotated dims: copy two elements.
    const uint e = pc.n_dims + 2u * (slot - n_pairs);
    for (uint k = e; k < min(e + 2u, pc.ne0); ++k) {
      F32s(dst).v[k] = load_f32(src + uint64_t(k) * pc.a_nb0);
    }
    return;
  }
  const uint i = slot;
  const float p = float(I32s(pc.pos).v[i2]);
  float freq = exp2(-2.0 * float(i) / float(pc.n_dims) * pc.log2_base);
  if (pc.ff != 0ul) freq /= F32s(pc.ff).v[i];
  float ramp_mix = 0.0;
  if (pc.ext_factor != 0.0) {
    const float y = (float(i) - pc.corr_lo) / max(0.001, pc.corr_hi - pc.corr_lo);
    ramp_mix = (1.0 - min(1.0, max(0.0, y))) * pc.ext_factor;
  }
  const float theta = p * (freq * (pc.freq_scale * (1.0 - ramp_mix) + ramp_mix));
  const float k = round(theta / 6.283185307179586);
  precise float t = ((theta - k * kTwoPiHi) - k * kTwoPiMid) - k * kTwoPiLo;
  float s, c;
  sin_cos(t, s, c);
  c *= pc.mscale;
  s *= pc.mscale;
  const uint e0 = pc.neox != 0u ? i : 2u * i;
  const uint e1 = pc.neox != 0u ? i + n_pairs : 2u * i + 1u;
  const float x0 = load_f32(src + uint64_t(e0) * pc.a_nb0);
  const float x1 = load_f32(src + uint64_t(e1) * pc.a_nb0);
  F32s(dst).v[e0] = x0 * c - x1 * s;
  F32s(dst).v[e1] = x0 * s + x1 * c;
}
