#version 460
// MUL_MAT with few activation columns (decode, one column per sequence of a batch) on GPUs: a
// workgroup computes ROWS weight rows for COLS activation columns. Its invocations share the
// rows' 32-weight units; each invocation loads a weight unit once and meets every column of
// the workgroup with it, so a step of several sequences reads the weights once, not once per
// sequence. The partial sums are reduced with subgroup arithmetic, then across subgroups in
// shared memory. A column's sums do not depend on COLS or ROWS: the same invocation takes
// the same units in the same order and the reductions are the same, so a sequence's results
// are bit-identical whatever else is in the batch.
// MODE 0: one product, batched over dims 2/3.
// MODE 1: up to three 2-D products of the same activations (a layer's q, k and v): their rows
//         are laid end to end and each row picks its matrix, so one dispatch computes all.
// MODE 2: SWIGLU(gate x, up x) of two 2-D products: a workgroup computes ROWS rows of both and
//         writes the two products and their SWIGLU.
// The push constants of modes 1 and 2 are those of mul_mat_reg.comp's modes 1 and 2.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "act_unit.glsl"
#include "mul_mat_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TYPE = 0;
layout(constant_id = 2) const uint ROWS = 4;
layout(constant_id = 3) const uint MODE = 0;
layout(constant_id = 4) const uint COLS = 1;

// Slots by mode (MatMulPC in vk_op_matmul.cc):
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

const uint PRODUCTS = MODE == 2u ? 2u : 1u;  // weight rows per output row.
const uint ACC = PRODUCTS * ROWS;  // accumulators per column.
const uint kMaxSubgroups = 32u;

// [column][accumulator][subgroup]; vk_op_matmul.cc keeps COLS * ACC small (registers).
shared float partial_s[COLS * ACC * kMaxSubgroups];

float silu(float x) { return x / (1.0 + exp(-x)); }

// Where output row `r` (of the rows end to end in mode 1) reads its weights and writes its
// result in column n: the weight row's address, the result's.
void Locate(uint r, uint n, uint i2, uint i3, out uint64_t arow, out uint64_t dst) {
  if (MODE == 1u) {
    const uint M0 = pc.u[1], M1 = pc.u[4], M2 = pc.u[5];
    const uint s = r < M0 ? 0u : (r < M0 + M1 ? 1u : 2u);
    const uint m = s == 0u ? r : (s == 1u ? r - M0 : r - M0 - M1);
    const uint nb1 = s == 0u ? pc.u[3] : (s == 1u ? pc.u[7] : pc.u[8]);
    const uint Ms = s == 0u ? M0 : (s == 1u ? M1 : M2);
    arow = (s == 0u ? pc.p[1] : (s == 1u ? pc.p[2] : pc.q[0])) + uint64_t(m) * nb1;
    dst = pc.q[1 + s] + (uint64_t(n) * Ms + m) * 4u;
  } else if (MODE == 2u) {
    arow = pc.p[1] + uint64_t(r) * pc.u[3];
    dst = pc.q[0] + uint64_t(n) * pc.u[9] + uint64_t(r) * 4u;
  } else {
    arow = pc.p[0] + uint64_t(i2 / pc.u[13]) * pc.u[4] + uint64_t(i3 / pc.u[14]) * pc.u[5] +
           uint64_t(r) * pc.u[3];
    dst = pc.p[2] + uint64_t(n) * pc.u[9] + uint64_t(i2) * pc.u[10] + uint64_t(i3) * pc.u[11] +
          uint64_t(r) * 4u;
  }
}

// Writes output row r of column n from its accumulators (g: the row's product; in mode 2 the
// gate's, with v the up's).
void Store(uint r, uint n, uint i2, uint i3, float g, float v) {
  uint64_t arow, dst;
  Locate(r, n, i2, i3, arow, dst);
  if (MODE == 2u) {
    // The products first: the graph allocator may have put the SWIGLU in place of one.
    const uint64_t at = uint64_t(n) * pc.u[9] + uint64_t(r) * 4u;
    F32s(pc.q[1] + at).v[0] = g;
    F32s(pc.q[2] + at).v[0] = v;
    F32s(dst).v[0] = silu(g) * v;
  } else {
    F32s(dst).v[0] = g;
  }
}

void main() {
  const uint K = pc.u[0];
  const uint total = MODE == 1u ? pc.u[1] + pc.u[4] + pc.u[5] : pc.u[1];
  const uint m0 = gl_WorkGroupID.x * ROWS;
  const uint n0 = gl_WorkGroupID.y * COLS;
  const uint ncols = min(COLS, pc.u[2] - n0);
  const uint i2 = MODE == 0u ? gl_WorkGroupID.z % pc.u[12] : 0u;
  const uint i3 = MODE == 0u ? gl_WorkGroupID.z / pc.u[12] : 0u;
  const uint b_nb1 = pc.u[6];
  const uint64_t brow0 = MODE == 0u
      ? pc.p[1] + uint64_t(n0) * b_nb1 + uint64_t(i2) * pc.u[7] + uint64_t(i3) * pc.u[8]
      : pc.p[0] + uint64_t(n0) * b_nb1;
  const uint units = (K + 31u) / 32u;
  const uint rows = min(ROWS, total - m0);
  float acc[COLS * ACC];
  [[unroll]] for (uint i = 0u; i < COLS * ACC; ++i) acc[i] = 0.0;
  [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
    if (r >= rows) break;
    uint64_t arow[PRODUCTS], dst;
    Locate(m0 + r, n0, i2, i3, arow[0], dst);
    if (MODE == 2u) arow[PRODUCTS - 1u] = pc.p[2] + uint64_t(m0 + r) * pc.u[7];
    [[unroll]] for (uint p = 0u; p < PRODUCTS; ++p) {
      // Weight unit u meets unit u of each of the workgroup's columns.
      for (uint u = gl_LocalInvocationID.x; u < units; u += gl_WorkGroupSize.x) {
        if (is_quant(TYPE)) {
          const WUnit wu = load_wunit(TYPE, arow[p], u);
          [[unroll]] for (uint c = 0u; c < COLS; ++c) {
            if (c >= ncols) break;
            const uint64_t au = brow0 + uint64_t(c) * b_nb1 + uint64_t(u) * kActUnitBytes;
            uint a[10];
            [[unroll]] for (uint w = 0u; w < 10u; ++w) a[w] = U32s(au).v[w];
            acc[c * ACC + p * ROWS + r] += wunit_dot_words(TYPE, wu, a);
          }
        } else {
          float x[32];
          load_funit(TYPE, arow[p], u, K, x);
          const uint n = min(32u, K - u * 32u);
          [[unroll]] for (uint c = 0u; c < COLS; ++c) {
            if (c >= ncols) break;
            const uint64_t bu = brow0 + uint64_t(c) * b_nb1 + uint64_t(u) * 128u;
            acc[c * ACC + p * ROWS + r] += funit_dot(x, bu, n);
          }
        }
      }
    }
  }
  [[unroll]] for (uint i = 0u; i < COLS * ACC; ++i) acc[i] = subgroupAdd(acc[i]);
  if (gl_NumSubgroups == 1u) {
    if (gl_LocalInvocationID.x == 0u) {
      [[unroll]] for (uint c = 0u; c < COLS; ++c) {
        [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
          if (c < ncols && r < rows) {
            const uint i = c * ACC + r;
            Store(m0 + r, n0 + c, i2, i3, acc[i], acc[i + (PRODUCTS - 1u) * ROWS]);
          }
        }
      }
    }
    return;
  }
  if (subgroupElect()) {
    [[unroll]] for (uint i = 0u; i < COLS * ACC; ++i) {
      partial_s[i * kMaxSubgroups + gl_SubgroupID] = acc[i];
    }
  }
  barrier();
  // One invocation per (column, row) output sums its subgroups' partials in subgroup order.
  for (uint t = gl_LocalInvocationID.x; t < COLS * ROWS; t += gl_WorkGroupSize.x) {
    const uint c = t / ROWS, r = t % ROWS;
    if (c >= ncols || r >= rows) continue;
    float s[PRODUCTS];
    [[unroll]] for (uint p = 0u; p < PRODUCTS; ++p) {
      s[p] = 0.0;
      const uint i = c * ACC + p * ROWS + r;
      for (uint g = 0u; g < gl_NumSubgroups; ++g) s[p] += partial_s[i * kMaxSubgroups + g];
    }
    Store(m0 + r, n0 + c, i2, i3, s[0], s[PRODUCTS - 1u]);
  }
}
