#version 460
// FLASH_ATTN for few queries (decode), on GPUs: one workgroup per (head h = gl_WorkGroupID.y,
// batch b = z) takes all n_q <= ROWS query rows of the head and spreads the KEYS over the
// workgroup, where flash_attn.comp spreads queries and would leave all but one invocation of
// a decode step idle. The workgroup is NS subgroups of SG invocations, cut into teams of TEAM
// consecutive invocations of a subgroup. A team scores one key at a time: each member holds
// every TEAM-th word of the q rows and of the key's K and V rows (neighbouring members read
// neighbouring words), and the partial dot products meet by butterfly shuffles, so every
// member ends with the same score. Team t takes keys t, t + TEAMS, t + 2 TEAMS, ... with an
// online softmax of its own (running maximum, sum, and its words of the output rows). At the
// end the teams' states merge as split-K flash decoding merges its splits: the workgroup's
// maximum M, each state scaled by exp(m_t - M), sums and outputs added up (shuffles across
// the teams of a subgroup, shared memory across subgroups), out = acc / sum.
//
// Masked keys (-inf) never contribute, whatever their K and V rows hold; a fully masked row
// gives zeros. Keys that every team of a subgroup skips cost a mask load. Control flow is
// uniform within a subgroup (a key skipped is skipped by the whole subgroup) and the trip
// count of the key loop is uniform over the workgroup, for the shuffles and the barriers.
// The shader reads its subgroup layout from gl_SubgroupID and gl_SubgroupInvocationID;
// SPIR-V below 1.6 without the varying-size flag (this backend compiles for Vulkan 1.2)
// has gl_SubgroupSize equal to the device's subgroupSize, SG here.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require

layout(local_size_x_id = 0) in;  // NS * SG
layout(constant_id = 1) const uint K_F16 = 0;
layout(constant_id = 2) const uint V_F16 = 0;
layout(constant_id = 3) const uint HEAD = 64;
layout(constant_id = 4) const uint HEAD_V = 64;
layout(constant_id = 5) const uint SG = 32;   // the device's subgroup size.
layout(constant_id = 6) const uint TEAM = 8;  // invocations per key: a power of two <= SG.
layout(constant_id = 7) const uint ROWS = 1;  // query rows kept in registers: n_q <= ROWS.

#include "flash_attn_common.glsl"

const uint WG = gl_WorkGroupSize.x;
const uint NS = WG / SG;
const uint TEAMS = WG / TEAM;  // keys in flight.
// 32-bit words per row (pairs of halves, or floats), elements per word, words per member.
const uint KW = K_F16 != 0u ? HEAD / 2u : HEAD;
const uint VW = V_F16 != 0u ? HEAD_V / 2u : HEAD_V;
const uint KE = K_F16 != 0u ? 2u : 1u;
const uint VE = V_F16 != 0u ? 2u : 1u;
const uint KU = (KW + TEAM - 1u) / TEAM;
const uint VU = (VW + TEAM - 1u) / TEAM;

shared float sh_max[NS * ROWS];
shared float sh_sum[NS];
shared float sh_out[NS * HEAD_V];

float q_part[ROWS][KU * KE];   // the member's words of the q rows.
float acc[ROWS][VU * VE];      // the member's words of the output rows, unnormalized.
float m_run[ROWS], l_run[ROWS];

uint64_t row_of(uint64_t base, uint r, uint nb1) { return base + uint64_t(r) * nb1; }

void load_queries(uint member, uint h, uint b) {
  const uint64_t qhead = pc.q + uint64_t(h) * pc.q_nb2 + uint64_t(b) * pc.q_nb3;
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    const uint64_t qrow = row_of(qhead, min(r, pc.n_q - 1u), pc.q_nb1);
    [[unroll]] for (uint u = 0u; u < KU; ++u) {
      const uint w = member + u * TEAM;
      [[unroll]] for (uint e = 0u; e < KE; ++e) {
        q_part[r][u * KE + e] = 0.0;
        if (w < KW) q_part[r][u * KE + e] = q_elem(qrow, w * KE + e);
      }
    }
  }
}

// Key j for every row: its scores (by the team's shuffles), then the online-softmax step.
void attend(uint member, uint64_t krow, uint64_t vrow, const float mv[ROWS],
            const bool masked[ROWS]) {
  float dot[ROWS];
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) dot[r] = 0.0;
  [[unroll]] for (uint u = 0u; u < KU; ++u) {
    const uint w = member + u * TEAM;
    const uint word = w < KW ? U32s(krow).v[w] : 0u;
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
      if (K_F16 != 0u) {
        const vec2 x = unpackHalf2x16(word);
        dot[r] += q_part[r][2u * u] * x.x + q_part[r][2u * u + 1u] * x.y;
      } else {
        dot[r] += q_part[r][u] * uintBitsToFloat(word);
      }
    }
  }
  // x + partner and partner + x are the same float: all members agree on every score.
  [[unroll]] for (uint s = TEAM / 2u; s > 0u; s >>= 1u) {
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) dot[r] += subgroupShuffleXor(dot[r], s);
  }
  float correction[ROWS], p[ROWS];
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    const float s = masked[r] ? neg_inf() : dot[r] * pc.scale + mv[r];
    const float m_new = max(m_run[r], s);
    const bool none = is_neg_inf(m_new);  // nothing visible so far.
    correction[r] = none ? 1.0 : exp(m_run[r] - m_new);
    p[r] = masked[r] || none ? 0.0 : exp(s - m_new);
    m_run[r] = m_new;
    l_run[r] = l_run[r] * correction[r] + p[r];
  }
  [[unroll]] for (uint u = 0u; u < VU; ++u) {
    const uint w = member + u * TEAM;
    const uint word = w < VW ? U32s(vrow).v[w] : 0u;
    const vec2 x = V_F16 != 0u ? unpackHalf2x16(word) : vec2(uintBitsToFloat(word), 0.0);
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
      [[unroll]] for (uint e = 0u; e < VE; ++e) {
        // A masked key's V row is never used: it may hold anything (stale cache slots).
        const float add = masked[r] ? 0.0 : p[r] * x[e];
        acc[r][u * VE + e] = acc[r][u * VE + e] * correction[r] + add;
      }
    }
  }
}

// The teams' states of row r merged and written: out = sum_t acc_t e^(m_t - M) / sum_t l_t
// e^(m_t - M). Called by the whole workgroup.
void merge_and_store(uint r, uint member, uint64_t drow) {
  const uint sid = gl_SubgroupInvocationID, sg = gl_SubgroupID;
  float mx = subgroupMax(m_run[r]);
  if (sid == 0u) sh_max[sg * ROWS + r] = mx;
  barrier();
  [[unroll]] for (uint s = 0u; s < NS; ++s) mx = max(mx, sh_max[s * ROWS + r]);
  const float f = is_neg_inf(m_run[r]) ? 0.0 : exp(m_run[r] - mx);
  float l = l_run[r] * f;
  float part[VU * VE];
  [[unroll]] for (uint c = 0u; c < VU * VE; ++c) part[c] = acc[r][c] * f;
  // Members of the same rank in the subgroup's teams hold the same words.
  [[unroll]] for (uint s = TEAM; s < SG; s <<= 1u) {
    l += subgroupShuffleXor(l, s);
    [[unroll]] for (uint c = 0u; c < VU * VE; ++c) part[c] += subgroupShuffleXor(part[c], s);
  }
  if (sid < TEAM) {  // the subgroup's first team.
    if (sid == 0u) sh_sum[sg] = l;
    [[unroll]] for (uint u = 0u; u < VU; ++u) {
      const uint w = member + u * TEAM;
      [[unroll]] for (uint e = 0u; e < VE; ++e) {
        if (w < VW) sh_out[sg * HEAD_V + w * VE + e] = part[u * VE + e];
      }
    }
  }
  barrier();
  float sum = 0.0;
  [[unroll]] for (uint s = 0u; s < NS; ++s) sum += sh_sum[s];
  const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
  [[unroll]] for (uint c0 = 0u; c0 < HEAD_V; c0 += WG) {
    const uint c = c0 + gl_LocalInvocationID.x;
    if (c < HEAD_V) {
      float o = 0.0;
      [[unroll]] for (uint s = 0u; s < NS; ++s) o += sh_out[s * HEAD_V + c];
      F32s(drow).v[c] = o * inv;
    }
  }
  barrier();  // before the next row reuses the shared arrays.
}

void main() {
  const uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  const uint hk = h / (pc.H / pc.H_kv);
  const uint member = gl_SubgroupInvocationID % TEAM;
  const uint team = gl_SubgroupID * (SG / TEAM) + gl_SubgroupInvocationID / TEAM;
  load_queries(member, h, b);
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    m_run[r] = neg_inf();
    l_run[r] = 0.0;
    [[unroll]] for (uint c = 0u; c < VU * VE; ++c) acc[r][c] = 0.0;
  }
  const uint64_t kbase = pc.k + uint64_t(hk) * pc.k_nb2 + uint64_t(b) * pc.k_nb3;
  const uint64_t vbase = pc.v + uint64_t(hk) * pc.v_nb2 + uint64_t(b) * pc.v_nb3;
  const uint blocks = (pc.n_kv + TEAMS - 1u) / TEAMS;
  for (uint blk = 0u; blk < blocks; ++blk) {
    const uint j = blk * TEAMS + team;
    const bool key = j < pc.n_kv;
    float mv[ROWS];
    bool masked[ROWS];
    bool all_masked = true;
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
      const bool row = r < pc.n_q;
      mv[r] = key && row ? mask_at(row_of(pc.m, r, pc.m_nb1), j) : 0.0;
      masked[r] = !key || !row || is_neg_inf(mv[r]);
      all_masked = all_masked && masked[r];
    }
    if (subgroupAll(all_masked)) continue;  // uniform in the subgroup.
    const uint jr = key ? j : 0u;           // a row to read; its scores are masked.
    attend(member, row_of(kbase, jr, pc.k_nb1), row_of(vbase, jr, pc.v_nb1), mv, masked);
  }
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    if (r < pc.n_q) merge_and_store(r, member, dst_row(h, r, b, HEAD_V));  // uniform.
  }
}
