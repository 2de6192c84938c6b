#version 460
// FLASH_ATTN: a workgroup is one subgroup of SG invocations, each owning one query position
// of head gl_WorkGroupID.y (batch z), walking every key with an online softmax (running
// maximum and sum) and its output row in registers: no shared memory, no barriers. All
// invocations need the same K and V rows, so each loads 1/SG of a row and the subgroup
// shares the words by shuffles: CPU-like devices (lavapipe) pay per load instruction and per
// invocation, GPUs get coalesced loads. Control flow stays uniform (masked keys weigh 0) for
// the shuffles. HEAD and HEAD_V are the head sizes (specialization constants: the loops over
// a row unroll, which also keeps lavapipe's limit of 65535 loop iterations per invocation
// for the walk over the keys). With F16 K (K_F16), q is rounded to f16 first, as docs/ops.md
// specifies. When the subgroup is not the whole workgroup (a driver chose another size),
// every invocation loads the rows itself.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint K_F16 = 0;
layout(constant_id = 2) const uint V_F16 = 0;
layout(constant_id = 3) const uint HEAD = 64;
layout(constant_id = 4) const uint HEAD_V = 64;
layout(constant_id = 5) const uint SG = 8;  // the device's subgroup size = the workgroup size.

#include "flash_attn_common.glsl"

// 32-bit words per row: pairs of halves, or floats. (F16 heads are even: SupportsNode.)
const uint KW = K_F16 != 0u ? HEAD / 2u : HEAD;
const uint VW = V_F16 != 0u ? HEAD_V / 2u : HEAD_V;
const uint KL = (KW + SG - 1u) / SG;  // words each invocation loads.
const uint VL = (VW + SG - 1u) / SG;

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint i = gl_WorkGroupID.x * SG + lane;
  const uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  const bool valid = i < pc.n_q;
  const bool shared_loads = gl_SubgroupSize == SG && gl_NumSubgroups == 1u;
  const uint hk = h / (pc.H / pc.H_kv);
  const uint64_t qrow =
      pc.q + uint64_t(valid ? i : 0u) * pc.q_nb1 + uint64_t(h) * pc.q_nb2 + uint64_t(b) * pc.q_nb3;
  float q[HEAD];
  [[unroll]] for (uint c = 0u; c < HEAD; ++c) q[c] = q_elem(qrow, c);
  const uint64_t kbase = pc.k + uint64_t(hk) * pc.k_nb2 + uint64_t(b) * pc.k_nb3;
  const uint64_t vbase = pc.v + uint64_t(hk) * pc.v_nb2 + uint64_t(b) * pc.v_nb3;
  const uint64_t mrow = pc.m != 0ul ? pc.m + uint64_t(valid ? i : 0u) * pc.m_nb1 : 0ul;
  float m_run = neg_inf();
  float l_run = 0.0;
  float acc[HEAD_V];
  [[unroll]] for (uint c = 0u; c < HEAD_V; ++c) acc[c] = 0.0;
  for (uint j = 0u; j < pc.n_kv; ++j) {
    const float mv = mask_at(mrow, j);
    const bool masked = !valid || is_neg_inf(mv);
    // Keys no invocation sees (the causal future, the padding of a decode step's cache) cost
    // one mask load. The branch is uniform: the shuffles below stay legal.
    if (subgroupAll(masked)) continue;
    const uint64_t krow = kbase + uint64_t(j) * pc.k_nb1;
    const uint64_t vrow = vbase + uint64_t(j) * pc.v_nb1;
    uint kw[KL], vw[VL];
    [[unroll]] for (uint t = 0u; t < KL; ++t) {
      const uint w = lane + t * SG;
      kw[t] = shared_loads && w < KW ? U32s(krow).v[w] : 0u;
    }
    [[unroll]] for (uint t = 0u; t < VL; ++t) {
      const uint w = lane + t * SG;
      vw[t] = shared_loads && w < VW ? U32s(vrow).v[w] : 0u;
    }
    float dot = 0.0;
    [[unroll]] for (uint c = 0u; c < KW; ++c) {
      const uint word = shared_loads ? subgroupShuffle(kw[c / SG], c % SG) : U32s(krow).v[c];
      if (K_F16 != 0u) {
        const vec2 x = unpackHalf2x16(word);
        dot += q[2u * c] * x.x + q[2u * c + 1u] * x.y;
      } else {
        dot += q[c] * uintBitsToFloat(word);
      }
    }
    const float s = masked ? neg_inf() : dot * pc.scale + mv;
    const float m_new = max(m_run, s);
    const bool none = is_neg_inf(m_new);  // nothing visible so far.
    const float correction = none ? 1.0 : exp(m_run - m_new);
    const float p = masked || none ? 0.0 : exp(s - m_new);
    m_run = m_new;
    l_run = l_run * correction + p;
    [[unroll]] for (uint c = 0u; c < VW; ++c) {
      const uint word = shared_loads ? subgroupShuffle(vw[c / SG], c % SG) : U32s(vrow).v[c];
      if (V_F16 != 0u) {
        const vec2 x = unpackHalf2x16(word);
        acc[2u * c] = acc[2u * c] * correction + p * x.x;
        acc[2u * c + 1u] = acc[2u * c + 1u] * correction + p * x.y;
      } else {
        acc[c] = acc[c] * correction + p * uintBitsToFloat(word);
      }
    }
  }
  if (!valid) return;
  const uint64_t drow = dst_row(h, i, b, HEAD_V);
  const float inv = l_run > 0.0 ? 1.0 / l_run : 0.0;
  [[unroll]] for (uint c = 0u; c < HEAD_V; ++c) F32s(drow).v[c] = acc[c] * inv;
}
