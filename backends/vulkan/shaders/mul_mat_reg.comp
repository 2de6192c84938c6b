#version 460
// MUL_MAT on CPU-like devices (lavapipe), any number of activation columns: each invocation
// owns one weight row and TN activation columns and walks the row in 32-weight units, with
// everything in registers: no shared memory, no barriers. Each weight unit is loaded once for
// all TN columns. The activation units are the same for a whole subgroup (its invocations
// take neighbouring rows of the same columns), so each invocation loads 1/SG of them and the
// subgroup shares the words by shuffles: lavapipe pays per load instruction and invocation.
// Workgroup x covers rows, y groups of TN columns, z the batch. (When the subgroup is not
// SG wide, every invocation loads everything itself.)
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "act_unit.glsl"
#include "mul_mat_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TYPE = 0;
layout(constant_id = 2) const uint TN = 1;
layout(constant_id = 3) const uint SG = 8;  // the device's subgroup size.

layout(push_constant) uniform PC {
  uint64_t a, b, d;
  uint K, M, N, a_nb1;
  uint a_nb2, a_nb3, b_nb1, b_nb2;
  uint b_nb3, d_nb1, d_nb2, d_nb3;
  uint ne12, r2, r3;
} pc;

// 32-bit words of one column's activations per unit: a packed unit, or 32 floats.
const bool QUANT = TYPE == T_Q4_0 || TYPE == T_Q8_0 || TYPE == T_Q4_K || TYPE == T_Q6_K;
const uint WPC = QUANT ? 10u : 32u;
const uint AW = TN * WPC;
const uint AL = (AW + SG - 1u) / SG;  // words each invocation loads per unit.

void main() {
  const uint m_raw = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  const bool valid = m_raw < pc.M;
  const uint m = valid ? m_raw : pc.M - 1u;  // rows past the end work along, unused.
  const uint n0 = gl_WorkGroupID.y * TN;
  const uint i2 = gl_WorkGroupID.z % pc.ne12, i3 = gl_WorkGroupID.z / pc.ne12;
  const uint64_t arow = pc.a + uint64_t(i2 / pc.r2) * pc.a_nb2 + uint64_t(i3 / pc.r3) * pc.a_nb3 +
                        uint64_t(m) * pc.a_nb1;
  const uint64_t bbase = pc.b + uint64_t(i2) * pc.b_nb2 + uint64_t(i3) * pc.b_nb3;
  const uint cols = min(TN, pc.N - n0);
  const bool shared_loads = gl_SubgroupSize == SG;
  const uint lane = gl_SubgroupInvocationID;
  float acc[TN];
  [[unroll]] for (uint c = 0u; c < TN; ++c) acc[c] = 0.0;
  const uint units = (pc.K + 31u) / 32u;
  const uint unit_stride = QUANT ? kActUnitBytes : 128u;
  for (uint u = 0u; u < units; ++u) {
    const uint valid_words = QUANT ? WPC : min(32u, pc.K - 32u * u);
    uint aw[AL];
    [[unroll]] for (uint t = 0u; t < AL; ++t) {
      const uint w = lane + t * SG;
      const uint c = w / WPC, x = w % WPC;
      aw[t] = shared_loads && w < AW && c < cols && x < valid_words
                  ? U32s(bbase + uint64_t(n0 + c) * pc.b_nb1 + uint64_t(u) * unit_stride).v[x]
                  : 0u;
    }
    if (QUANT) {
      const WUnit wu = load_wunit(TYPE, arow, u);  // once for all TN columns.
      [[unroll]] for (uint c = 0u; c < TN; ++c) {
        if (c >= cols) break;
        uint words[10];
        [[unroll]] for (uint x = 0u; x < 10u; ++x) {
          const uint w = c * WPC + x;
          words[x] = shared_loads ? subgroupShuffle(aw[w / SG], w % SG)
                                  : U32s(bbase + uint64_t(n0 + c) * pc.b_nb1 + uint64_t(u) * unit_stride).v[x];
        }
        acc[c] += wunit_dot_words(wu, words);
      }
    } else {
      float x[32];
      load_funit(TYPE, arow, u, pc.K, x);
      [[unroll]] for (uint c = 0u; c < TN; ++c) {
        if (c >= cols) break;
        float s = 0.0;
        [[unroll]] for (uint j = 0u; j < 32u; ++j) {
          const uint w = c * WPC + j;
          const uint word = shared_loads ? subgroupShuffle(aw[w / SG], w % SG)
              : (j < valid_words ? U32s(bbase + uint64_t(n0 + c) * pc.b_nb1 + uint64_t(u) * unit_stride).v[j] : 0u);
          s += x[j] * uintBitsToFloat(word);
        }
        acc[c] += s;
      }
    }
  }
  if (!valid) return;
  const uint64_t dbase = pc.d + uint64_t(i2) * pc.d_nb2 + uint64_t(i3) * pc.d_nb3;
  [[unroll]] for (uint c = 0u; c < TN; ++c) {
    if (c < cols) F32s(dbase + uint64_t(n0 + c) * pc.d_nb1).v[m] = acc[c];
  }
}
