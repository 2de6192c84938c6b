#version 460
// MUL_MAT with many activation columns (prefill) on GPUs: BM x BN output tiles. Each BK slice of the
// weights is dequantized into shared memory once per tile and shared by all BN columns. The
// tiles are stored k-major (a_s[k][m], b_s[k][n]) and invocation (tm, tn) owns rows
// tm, tm + BM/TM, ... and columns tn * TN .. : neighbouring invocations read neighbouring
// a_s words and the same b_s word, which CPU-like devices (lavapipe) turn into vector loads
// and broadcasts rather than gathers. Tile sizes are specialization constants. The loops
// inside a k-slice are unrolled: lavapipe ends an invocation after 65535 loop iterations in
// all, which the slices of a long row would otherwise reach.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "act_unit.glsl"
#include "mul_mat_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TYPE = 0;
layout(constant_id = 2) const uint BM = 64;
layout(constant_id = 3) const uint BN = 64;
const uint BK = 32;
// Invocations form a (BM / TM) x (BN / TN) grid.
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;

layout(push_constant) uniform PC {  // MatMulPC in vk_op_matmul.cc.
  uint64_t a, b, d;
  uint K, M, N, a_nb1;
  uint a_nb2, a_nb3, b_nb1, b_nb2;
  uint b_nb3, d_nb1, d_nb2, d_nb3;
  uint ne12, r2, r3;
} pc;

shared float a_s[BK * BM];
shared float b_s[BK * BN];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint nthreads = gl_WorkGroupSize.x;
  const uint m0 = gl_WorkGroupID.x * BM;
  const uint n0 = gl_WorkGroupID.y * BN;
  const uint i2 = gl_WorkGroupID.z % pc.ne12, i3 = gl_WorkGroupID.z / pc.ne12;
  const uint64_t abase = pc.a + uint64_t(i2 / pc.r2) * pc.a_nb2 + uint64_t(i3 / pc.r3) * pc.a_nb3;
  const uint64_t bbase = pc.b + uint64_t(i2) * pc.b_nb2 + uint64_t(i3) * pc.b_nb3;
  const uint RM = BM / TM;  // invocations along m.
  const uint tm = t % RM, tn = t / RM;
  float acc[TM * TN];
  for (uint i = 0u; i < TM * TN; ++i) acc[i] = 0.0;
  for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
    if (is_quant(TYPE)) {
      // A unit (BK weights of one row) per invocation.
      for (uint r = t; r < BM; r += nthreads) {
        const uint m = m0 + r;
        if (m >= pc.M) {
          [[unroll]] for (uint j = 0u; j < BK; ++j) a_s[j * BM + r] = 0.0;
          continue;
        }
        const WUnit wu = load_wunit(TYPE, abase + uint64_t(m) * pc.a_nb1, k0 / BK);
        [[unroll]] for (uint j = 0u; j < BK; ++j) a_s[j * BM + r] = wunit_elem(TYPE, wu, j);
      }
    } else {
      for (uint e = t; e < BM * BK; e += nthreads) {
        const uint r = e / BK, j = e % BK;
        const uint m = m0 + r, k = k0 + j;
        a_s[j * BM + r] =
            (m < pc.M && k < pc.K) ? weight_elem(TYPE, abase + uint64_t(m) * pc.a_nb1, k) : 0.0;
      }
    }
    for (uint e = t; e < BN * BK; e += nthreads) {
      const uint c = e / BK, j = e % BK;
      const uint n = n0 + c, k = k0 + j;
      const uint64_t brow = bbase + uint64_t(n) * pc.b_nb1;
      b_s[j * BN + c] = (n >= pc.N || k >= pc.K) ? 0.0
                        : (is_quant(TYPE) ? act_elem(brow, k) : F32s(brow).v[k]);
    }
    barrier();
    [[unroll]] for (uint j = 0u; j < BK; ++j) {
      float av[TM], bv[TN];
      [[unroll]] for (uint x = 0u; x < TM; ++x) av[x] = a_s[j * BM + tm + x * RM];
      [[unroll]] for (uint y = 0u; y < TN; ++y) bv[y] = b_s[j * BN + tn * TN + y];
      [[unroll]] for (uint x = 0u; x < TM; ++x) {
        [[unroll]] for (uint y = 0u; y < TN; ++y) acc[x * TN + y] += av[x] * bv[y];
      }
    }
    barrier();
  }
  const uint64_t dbase = pc.d + uint64_t(i2) * pc.d_nb2 + uint64_t(i3) * pc.d_nb3;
  for (uint y = 0u; y < TN; ++y) {
    const uint n = n0 + tn * TN + y;
    if (n >= pc.N) continue;
    for (uint x = 0u; x < TM; ++x) {
      const uint m = m0 + tm + x * RM;
      if (m < pc.M) F32s(dbase + uint64_t(n) * pc.d_nb1).v[m] = acc[x * TN + y];
    }
  }
}
