#version 460
// FLASH_ATTN: one workgroup per (query position, head, batch). Keys go by in blocks of one
// per invocation: scores, the block's maximum, then the online-softmax update of the running
// maximum, sum and the output accumulator (each invocation owning output columns
// t, t + WG, ...). With F16 K (K_F16), q is rounded to f16 first, as docs/ops.md specifies.
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint K_F16 = 0;
layout(constant_id = 2) const uint V_F16 = 0;

const uint kMaxHead = 512;  // D and Dv up to this (SupportsNode checks).
const uint kMaxCols = 16;   // output columns per invocation: kMaxHead / the smallest WG (32).

layout(push_constant) uniform PC {
  uint64_t q, k, v, m, d;
  uint q_nb1, q_nb2, q_nb3, m_nb1;
  uint k_nb1, k_nb2, k_nb3, m_type;
  uint v_nb1, v_nb2, v_nb3, n_kv;
  uint D, Dv, n_q, H;
  uint H_kv;
  float scale;
} pc;

shared float q_s[kMaxHead];
shared float p_s[256];

float kv_elem(uint64_t row, uint i, bool f16) {
  return f16 ? f16_to_f32(uint(U16s(row).v[i])) : F32s(row).v[i];
}

void main() {
  const uint wg = gl_WorkGroupSize.x;
  const uint t = gl_LocalInvocationID.x;
  const uint id = flat_group();
  const uint i = id % pc.n_q;
  const uint h = (id / pc.n_q) % pc.H;
  const uint b = id / (pc.n_q * pc.H);
  const uint hk = h / (pc.H / pc.H_kv);
  const uint64_t qrow = pc.q + uint64_t(i) * pc.q_nb1 + uint64_t(h) * pc.q_nb2 + uint64_t(b) * pc.q_nb3;
  for (uint c = t; c < pc.D; c += wg) {
    const float x = F32s(qrow).v[c];
    q_s[c] = K_F16 != 0u ? f16_to_f32(f32_to_f16(x)) : x;
  }
  barrier();
  const uint64_t kbase = pc.k + uint64_t(hk) * pc.k_nb2 + uint64_t(b) * pc.k_nb3;
  const uint64_t vbase = pc.v + uint64_t(hk) * pc.v_nb2 + uint64_t(b) * pc.v_nb3;
  const uint64_t mrow = pc.m != 0ul ? pc.m + uint64_t(i) * pc.m_nb1 : 0ul;
  const float neg_inf = uintBitsToFloat(0xff800000u);
  float m_run = neg_inf;
  float l_run = 0.0;
  float acc[kMaxCols];
  for (uint c = 0u; c < kMaxCols; ++c) acc[c] = 0.0;
  for (uint j0 = 0u; j0 < pc.n_kv; j0 += wg) {
    const uint j = j0 + t;
    float s = neg_inf;
    if (j < pc.n_kv) {
      const float mv = pc.m != 0ul ? load_plain(pc.m_type, mrow + uint64_t(j) * (pc.m_type == T_F16 ? 2u : 4u)) : 0.0;
      if (!(isinf(mv) && mv < 0.0)) {
        const uint64_t krow = kbase + uint64_t(j) * pc.k_nb1;
        float dot = 0.0;
        for (uint c = 0u; c < pc.D; ++c) dot += q_s[c] * kv_elem(krow, c, K_F16 != 0u);
        s = dot * pc.scale + mv;
      }
    }
    const float m_blk = workgroup_max(s);
    const float m_new = max(m_run, m_blk);
    if (isinf(m_new) && m_new < 0.0) continue;  // nothing visible yet: uniform across the group.
    const float p = (isinf(s) && s < 0.0) ? 0.0 : exp(s - m_new);
    const float correction = (isinf(m_run) && m_run < 0.0) ? 0.0 : exp(m_run - m_new);
    barrier();
    p_s[t] = p;
    const float l_blk = workgroup_sum(p);
    l_run = l_run * correction + l_blk;
    m_run = m_new;
    barrier();
    const uint n_blk = min(wg, pc.n_kv - j0);
    for (uint cc = 0u; cc < kMaxCols; ++cc) {
      const uint c = t + cc * wg;
      if (c >= pc.Dv) break;
      float a = acc[cc] * correction;
      for (uint jj = 0u; jj < n_blk; ++jj) {
        const float pj = p_s[jj];
        if (pj != 0.0) a += pj * kv_elem(vbase + uint64_t(j0 + jj) * pc.v_nb1, c, V_F16 != 0u);
      }
      acc[cc] = a;
    }
  }
  // dst [Dv, H, n_q, B], contiguous.
  const uint64_t dst_row = pc.d + (uint64_t(h) + uint64_t(pc.H) * (uint64_t(i) + uint64_t(pc.n_q) * b)) * pc.Dv * 4u;
  const float inv = l_run > 0.0 ? 1.0 / l_run : 0.0;
  for (uint cc = 0u; cc < kMaxCols; ++cc) {
    const uint c = t + cc * wg;
    if (c >= pc.Dv) break;
    F32s(dst_row).v[c] = acc[cc] * inv;
  }
}
