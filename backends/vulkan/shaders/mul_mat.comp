#version 460
// MUL_MAT with many activation columns (prefill): BM x BN output tiles, the weights of a BK
// slice dequantized into shared memory once per tile and shared by all BN columns; each
// invocation accumulates TM x TN outputs in registers. Tile sizes are specialization
// constants (shared memory differs per device).
#include "common.glsl"
#include "mul_mat_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TYPE = 0;
layout(constant_id = 2) const uint BM = 64;
layout(constant_id = 3) const uint BN = 64;
const uint BK = 32;
// Invocations form a (BM / TM) x (BN / TN) grid.
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;

layout(push_constant) uniform PC {
  uint64_t a, b, d;
  uint K, M, N, a_nb1;
  uint a_nb2, a_nb3, b_nb1, b_nb2;
  uint b_nb3, d_nb1, d_nb2, d_nb3;
  uint ne12, r2, r3;
} pc;

shared float a_s[BM * (BK + 1)];
shared float b_s[BN * (BK + 1)];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint nthreads = gl_WorkGroupSize.x;
  const uint m0 = gl_WorkGroupID.x * BM;
  const uint n0 = gl_WorkGroupID.y * BN;
  const uint i2 = gl_WorkGroupID.z % pc.ne12, i3 = gl_WorkGroupID.z / pc.ne12;
  const uint64_t abase = pc.a + uint64_t(i2 / pc.r2) * pc.a_nb2 + uint64_t(i3 / pc.r3) * pc.a_nb3;
  const uint64_t bbase = pc.b + uint64_t(i2) * pc.b_nb2 + uint64_t(i3) * pc.b_nb3;
  const uint tm = t / (BN / TN), tn = t % (BN / TN);
  float acc[TM * TN];
  for (uint i = 0u; i < TM * TN; ++i) acc[i] = 0.0;
  for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
    // Weights: quantized types unit by unit (a unit is BK weights of one row), plain types
    // element by element.
    if (is_quant(TYPE)) {
      for (uint r = t; r < BM; r += nthreads) {
        const uint m = m0 + r;
        if (m < pc.M) {
          const uint64_t row = abase + uint64_t(m) * pc.a_nb1;
          for (uint j = 0u; j < BK; ++j) a_s[r * (BK + 1u) + j] = weight_elem(TYPE, row, k0 + j);
        } else {
          for (uint j = 0u; j < BK; ++j) a_s[r * (BK + 1u) + j] = 0.0;
        }
      }
    } else {
      for (uint e = t; e < BM * BK; e += nthreads) {
        const uint r = e / BK, j = e % BK;
        const uint m = m0 + r, k = k0 + j;
        a_s[r * (BK + 1u) + j] =
            (m < pc.M && k < pc.K) ? weight_elem(TYPE, abase + uint64_t(m) * pc.a_nb1, k) : 0.0;
      }
    }
    for (uint e = t; e < BN * BK; e += nthreads) {
      const uint c = e / BK, j = e % BK;
      const uint n = n0 + c, k = k0 + j;
      b_s[c * (BK + 1u) + j] =
          (n < pc.N && k < pc.K) ? F32s(bbase + uint64_t(n) * pc.b_nb1).v[k] : 0.0;
    }
    barrier();
    for (uint j = 0u; j < BK; ++j) {
      float av[TM], bv[TN];
      for (uint i = 0u; i < TM; ++i) av[i] = a_s[(tm * TM + i) * (BK + 1u) + j];
      for (uint i = 0u; i < TN; ++i) bv[i] = b_s[(tn * TN + i) * (BK + 1u) + j];
      for (uint x = 0u; x < TM; ++x) {
        for (uint y = 0u; y < TN; ++y) acc[x * TN + y] += av[x] * bv[y];
      }
    }
    barrier();
  }
  const uint64_t dbase = pc.d + uint64_t(i2) * pc.d_nb2 + uint64_t(i3) * pc.d_nb3;
  for (uint y = 0u; y < TN; ++y) {
    const uint n = n0 + tn * TN + y;
    if (n >= pc.N) continue;
    for (uint x = 0u; x < TM; ++x) {
      const uint m = m0 + tm * TM + x;
      if (m < pc.M) F32s(dbase + uint64_t(n) * pc.d_nb1).v[m] = acc[x * TN + y];
    }
  }
}
