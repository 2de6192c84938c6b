#version 460
// MUL_MAT on CPU-like devices (lavapipe), any number of activation columns: each invocation
// owns one weight row and TN activation columns and walks the row in 32-weight units, with
// everything in registers: no shared memory, no barriers. Each weight unit is loaded once for
// all TN columns. The activation units are the same for a whole subgroup (its invocations
// take neighbouring rows of the same columns), so each invocation loads 1/SG of them and the
// subgroup shares the words by shuffles: lavapipe pays per load instruction and invocation.
// Workgroup x covers rows, y groups of TN columns, z the batch. (When the subgroup is not
// SG wide, every invocation loads everything itself.)
// MODE 0: one product, batched over dims 2/3.
// MODE 1: up to three 2-D products of the same activations (a layer's q, k and v): their rows
//         are laid end to end, each invocation picks its matrix.
// MODE 2: SWIGLU(gate x, up x) of two 2-D products: an invocation computes a row of both and
//         writes the two products and their SWIGLU.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "act_unit.glsl"
#include "mul_mat_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TYPE = 0;
layout(constant_id = 2) const uint TN = 1;
layout(constant_id = 3) const uint SG = 8;  // the device's subgroup size.
layout(constant_id = 4) const uint MODE = 0;

// Slots by mode (MatMulPC in vk_op_matmul.cc; mode 0 is the layout of mul_mat.comp):
//  0: p = a, b, d; u = K, M, N, a_nb1, a_nb2, a_nb3, b_nb1, b_nb2, b_nb3, d_nb1, d_nb2, d_nb3,
//     ne12, r2, r3.
//  1: p = b, a0, a1; q = a2, d0, d1, d2; u = K, M0, N, a_nb1_0, M1, M2, b_nb1, a_nb1_1,
//     a_nb1_2.
//  2: p = b, a_gate, a_up; q = d, d_gate, d_up; u = K, M, N, a_nb1_gate, -, -, b_nb1,
//     a_nb1_up, -, d_nb1 (the three results share their layout).
layout(push_constant) uniform PC {
  uint64_t p[3];
  uint u[15];
  uint64_t q[4];
} pc;

const bool QUANT = TYPE != T_F32 && TYPE != T_F16 && TYPE != T_BF16;
// 32-bit words of one column's activations per unit: a packed unit, or 32 floats.
const uint WPC = QUANT ? 10u : 32u;
const uint AW = TN * WPC;
const uint AL = (AW + SG - 1u) / SG;  // words each invocation loads per unit.
const uint ROWS = MODE == 2u ? 2u : 1u;  // weight rows per invocation.

float silu(float x) { return x / (1.0 + exp(-x)); }

void main() {
  const uint K = pc.u[0], N = pc.u[2];
  const uint m_raw = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  uint64_t arow[ROWS];
  uint64_t bbase, dcol0;  // activations of column 0; where output column 0 starts.
  uint d_nb1, m;
  bool valid;
  if (MODE == 0u) {
    const uint M = pc.u[1];
    valid = m_raw < M;
    m = valid ? m_raw : M - 1u;  // rows past the end work along, unused.
    const uint i2 = gl_WorkGroupID.z % pc.u[12], i3 = gl_WorkGroupID.z / pc.u[12];
    arow[0] = pc.p[0] + uint64_t(i2 / pc.u[13]) * pc.u[4] + uint64_t(i3 / pc.u[14]) * pc.u[5] +
              uint64_t(m) * pc.u[3];
    bbase = pc.p[1] + uint64_t(i2) * pc.u[7] + uint64_t(i3) * pc.u[8];
    dcol0 = pc.p[2] + uint64_t(i2) * pc.u[10] + uint64_t(i3) * pc.u[11];
    d_nb1 = pc.u[9];
  } else if (MODE == 1u) {
    const uint M0 = pc.u[1], M1 = pc.u[4], M2 = pc.u[5];
    valid = m_raw < M0 + M1 + M2;
    const uint r = valid ? m_raw : M0 + M1 + M2 - 1u;
    const uint s = r < M0 ? 0u : (r < M0 + M1 ? 1u : 2u);
    m = s == 0u ? r : (s == 1u ? r - M0 : r - M0 - M1);
    const uint nb1 = s == 0u ? pc.u[3] : (s == 1u ? pc.u[7] : pc.u[8]);
    arow[0] = (s == 0u ? pc.p[1] : (s == 1u ? pc.p[2] : pc.q[0])) + uint64_t(m) * nb1;
    bbase = pc.p[0];
    dcol0 = pc.q[1 + s];
    d_nb1 = (s == 0u ? M0 : (s == 1u ? M1 : M2)) * 4u;
  } else {
    const uint M = pc.u[1];
    valid = m_raw < M;
    m = valid ? m_raw : M - 1u;
    arow[0] = pc.p[1] + uint64_t(m) * pc.u[3];
    arow[ROWS - 1u] = pc.p[2] + uint64_t(m) * pc.u[7];
    bbase = pc.p[0];
    dcol0 = pc.q[0];
    d_nb1 = pc.u[9];
  }
  const uint b_nb1 = pc.u[6];
  const uint n0 = gl_WorkGroupID.y * TN;
  const uint cols = min(TN, N - n0);
  const bool shared_loads = gl_SubgroupSize == SG;
  const uint lane = gl_SubgroupInvocationID;
  float acc[ROWS * TN];
  [[unroll]] for (uint c = 0u; c < ROWS * TN; ++c) acc[c] = 0.0;
  const uint units = (K + 31u) / 32u;
  const uint unit_stride = QUANT ? kActUnitBytes : 128u;
  for (uint u = 0u; u < units; ++u) {
    const uint valid_words = QUANT ? WPC : min(32u, K - 32u * u);
    uint aw[AL];
    [[unroll]] for (uint t = 0u; t < AL; ++t) {
      const uint w = lane + t * SG;
      const uint c = w / WPC, x = w % WPC;
      aw[t] = shared_loads && w < AW && c < cols && x < valid_words
                  ? U32s(bbase + uint64_t(n0 + c) * b_nb1 + uint64_t(u) * unit_stride).v[x]
                  : 0u;
    }
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
      if (QUANT) {
        const WUnit wu = load_wunit(TYPE, arow[r], u);  // once for all TN columns.
        [[unroll]] for (uint c = 0u; c < TN; ++c) {
          if (c >= cols) break;
          uint words[10];
          [[unroll]] for (uint x = 0u; x < 10u; ++x) {
            const uint w = c * WPC + x;
            words[x] = shared_loads
                ? subgroupShuffle(aw[w / SG], w % SG)
                : U32s(bbase + uint64_t(n0 + c) * b_nb1 + uint64_t(u) * unit_stride).v[x];
          }
          acc[r * TN + c] += wunit_dot_words(TYPE, wu, words);
        }
      } else {
        float x[32];
        load_funit(TYPE, arow[r], u, K, x);
        [[unroll]] for (uint c = 0u; c < TN; ++c) {
          if (c >= cols) break;
          float s = 0.0;
          [[unroll]] for (uint j = 0u; j < 32u; ++j) {
            const uint w = c * WPC + j;
            const uint word = shared_loads
                ? subgroupShuffle(aw[w / SG], w % SG)
                : (j < valid_words
                       ? U32s(bbase + uint64_t(n0 + c) * b_nb1 + uint64_t(u) * unit_stride).v[j]
                       : 0u);
            s += x[j] * uintBitsToFloat(word);
          }
          acc[r * TN + c] += s;
        }
      }
    }
  }
  if (!valid) return;
  [[unroll]] for (uint c = 0u; c < TN; ++c) {
    if (c >= cols) break;
    if (MODE == 2u) {
      // The products first: the graph allocator may have put the SWIGLU in place of one.
      F32s(pc.q[1] + uint64_t(n0 + c) * d_nb1).v[m] = acc[c];
      F32s(pc.q[2] + uint64_t(n0 + c) * d_nb1).v[m] = acc[(ROWS - 1u) * TN + c];
    }
    const float y = MODE == 2u ? silu(acc[c]) * acc[(ROWS - 1u) * TN + c] : acc[c];
    F32s(dcol0 + uint64_t(n0 + c) * d_nb1).v[m] = y;
  }
}
