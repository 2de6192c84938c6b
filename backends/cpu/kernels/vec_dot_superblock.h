// Internal to the dot kernels: the tile kernel shared by the 256-element super-block types
// whose sub-blocks of 16 or 32 have integer scales (Q2_K, Q3_K, Q5_K, IQ4_XS), against Q8_K
// activations (ggml's vec_dot_type for all of them). Only included by vec_dot_*.cc.
//
// A type describes itself through a policy struct T:
//   using Block;                    the GGUF block.
//   static constexpr bool kSigned;  weight bytes are signed (else unsigned: maddubs as is).
//   static constexpr bool kHasMins; the block subtracts dmin * min_g per group of 16.
//   static Scales GetScales(const Block&);  d, dmin and int16 scale / min per group of 16.
//   AVX-512: static void Weights(const Block&, __m512i w[4]);  elements 64 v .. 64 v + 63.
//   AVX2: static void Weights(const Block&, int h, __m256i* w0, __m256i* w1);  elements
//         64 h .. 64 h + 31 and 64 h + 32 .. 64 h + 63.
// so that x_e = d * scale_g(e) * w_e - dmin * min_g(e). The kernel multiplies the weight bytes
// with the activation quants (maddubs), scales the pairwise int16 sums per group in integers
// (madd / VPDPWSSD) and applies the mins through the activations' 16-element sums.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_SUPERBLOCK_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_SUPERBLOCK_H_

#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/vec_dot_simd.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {

inline constexpr int kSuperGroup = 16;  // elements per bsums entry and per scale slot.
inline constexpr int kSuperGroups = kQK_K / kSuperGroup;

// Q8_K activations in natural order, padded to whole cache lines.
struct alignas(64) ActQ8K {
  int8_t qs[kQK_K];
  int16_t bsums[kSuperGroups];  // sum of each 16 quants.
  float d;
};
static_assert(sizeof(ActQ8K) == 320);

inline size_t ActQ8KRowBytes(int64_t k) { return static_cast<size_t>(k / kQK_K) * sizeof(ActQ8K); }

inline void ActQ8KFromF32(const float* x, void* y, int64_t k) {
  ActQ8K* out = static_cast<ActQ8K*>(y);
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    out[i].d = QuantizeBlockQ8_K(x + i * kQK_K, out[i].qs);
    for (int g = 0; g < kSuperGroups; ++g) {
      out[i].bsums[g] = static_cast<int16_t>(SumI8(out[i].qs + g * kSuperGroup, kSuperGroup));
    }
  }
}

// What GetScales returns: int16 lane g of sc16 / min16 belongs to group g (elements 16 g..).
struct SuperScales {
  float d;
  float dmin;
  __m256i sc16;
  __m256i min16;
};

// 8 bytes duplicated pairwise to 16 int16 lanes: one value per 32 elements spread over the
// two groups of 16 it covers.
inline __m256i PairsToGroups(uint64_t bytes, bool is_signed) {
  const __m128i v = _mm_cvtsi64_si128(static_cast<int64_t>(bytes));
  const __m128i twice = _mm_unpacklo_epi8(v, v);
  return is_signed ? _mm256_cvtepi8_epi16(twice) : _mm256_cvtepu8_epi16(twice);
}

#if defined(TG_CPU_AVX512)

// The 32 bytes at p in both 256-bit halves of a register.
inline __m512i BroadcastBytes32(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Per-half int16 shift counts (for srlv_epi16): lo in the low 256 bits, hi in the high.
inline __m512i HalfShifts(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)),
                            _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
}

// int16 lane -> scale slot of its group, for each 64-quant register: lanes cover byte pairs,
// so lane l of register v holds elements 64 v + 2 l, 2 l + 1, in group 4 v + l / 8.
struct SuperIndex {
  __m512i idx[4];
};

inline SuperIndex MakeSuperIndex() {
  SuperIndex s;
  for (int v = 0; v < 4; ++v) {
    alignas(64) int16_t lanes[32];
    for (int l = 0; l < 32; ++l) lanes[l] = static_cast<int16_t>(4 * v + l / 8);
    s.idx[v] = _mm512_load_si512(lanes);
  }
  return s;
}

// The ISA's parts of SuperTile: the accumulators, the constants a tile loads once, and the
// scale-weighted integer dots of one block against C columns (zmm: a block in 4 registers).
struct SuperIsa {
  using Acc = __m512;
  using Ints = __m512i;
  using Consts = SuperIndex;
  static constexpr int kColsPerPass = 4;

  static Consts MakeConsts() {
    static const SuperIndex kIndex = MakeSuperIndex();
    return kIndex;
  }
  static Acc Zero() { return _mm512_setzero_ps(); }
  static Acc AddScaled(Ints isum, float scale, Acc acc) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(scale), acc);
  }
  static Acc SubScaled(__m256i mins, float scale, Acc acc) {
    return _mm512_fnmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(mins)), _mm512_set1_ps(scale),
                            acc);
  }
  static float Reduce(Acc acc) { return _mm512_reduce_add_ps(acc); }

  template <class T, int C>
  static void BlockDots(const typename T::Block& x, const SuperScales& s, const ActQ8K* const* y,
                        int64_t i, const Consts& index, Ints* isum) {
    __m512i w[4], sc[4];
    __mmask64 neg[4] = {};
    T::Weights(x, w);
    for (int v = 0; v < 4; ++v) {
      sc[v] = _mm512_permutexvar_epi16(index.idx[v], _mm512_castsi256_si512(s.sc16));
      if (T::kSigned) {  // |w| times y with w's sign: maddubs wants an unsigned left side.
        neg[v] = _mm512_movepi8_mask(w[v]);
        w[v] = _mm512_abs_epi8(w[v]);
      }
    }
    for (int j = 0; j < C; ++j) {
      isum[j] = _mm512_setzero_si512();
      for (int v = 0; v < 4; ++v) {
        __m512i yv = _mm512_load_si512(y[j][i].qs + 64 * v);
        if (T::kSigned) yv = _mm512_mask_sub_epi8(yv, neg[v], _mm512_setzero_si512(), yv);
        isum[j] = _mm512_dpwssd_epi32(isum[j], _mm512_maddubs_epi16(w[v], yv), sc[v]);
      }
    }
  }
};

#else  // AVX2

// pshufb masks giving, in each 128-bit lane, the scale of one group as 8 int16 lanes: chunk t
// (0..3) of a half super-block covers groups 2 t (low lane) and 2 t + 1 (high lane) of the 8
// whose scales a broadcast 128-bit half holds.
inline __m256i GroupShuffle(int t) {
  constexpr uint64_t kEvery16 = 0x0001000100010001ull;
  const uint64_t lo = 4 * t, hi = 4 * t + 2;  // byte offsets of the two int16 scales.
  const auto lo_pat = static_cast<int64_t>(kEvery16 * (lo | ((lo + 1) << 8)));
  const auto hi_pat = static_cast<int64_t>(kEvery16 * (hi | ((hi + 1) << 8)));
  return _mm256_setr_epi64x(lo_pat, lo_pat, hi_pat, hi_pat);
}

// As the AVX-512 SuperIsa, with ymm: a block in 4 pairs of registers.
struct SuperIsa {
  using Acc = __m256;
  using Ints = __m256i;
  struct Consts {
    __m256i shuf[4];
  };
  static constexpr int kColsPerPass = 2;  // 16 ymm registers.

  static Consts MakeConsts() {
    return {{GroupShuffle(0), GroupShuffle(1), GroupShuffle(2), GroupShuffle(3)}};
  }
  static Acc Zero() { return _mm256_setzero_ps(); }
  static Acc AddScaled(Ints isum, float scale, Acc acc) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale), acc);
  }
  static Acc SubScaled(__m256i mins, float scale, Acc acc) {
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(scale), acc);
  }
  static float Reduce(Acc acc) { return HorizontalSum(acc); }

  template <class T, int C>
  static void BlockDots(const typename T::Block& x, const SuperScales& s, const ActQ8K* const* y,
                        int64_t i, const Consts& k, Ints* isum) {
    const __m256i halves[2] = {_mm256_permute4x64_epi64(s.sc16, 0x44),
                               _mm256_permute4x64_epi64(s.sc16, 0xEE)};
    for (int j = 0; j < C; ++j) isum[j] = _mm256_setzero_si256();
    for (int h = 0; h < 4; ++h) {
      __m256i w0, w1;
      T::Weights(x, h, &w0, &w1);
      const __m256i sc0 = _mm256_shuffle_epi8(halves[h / 2], k.shuf[2 * (h % 2)]);
      const __m256i sc1 = _mm256_shuffle_epi8(halves[h / 2], k.shuf[2 * (h % 2) + 1]);
      const __m256i u0 = T::kSigned ? _mm256_sign_epi8(w0, w0) : w0;
      const __m256i u1 = T::kSigned ? _mm256_sign_epi8(w1, w1) : w1;
      for (int j = 0; j < C; ++j) {
        __m256i y0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(y[j][i].qs + 64 * h));
        __m256i y1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(y[j][i].qs + 64 * h + 32));
        if (T::kSigned) {
          y0 = _mm256_sign_epi8(y0, w0);
          y1 = _mm256_sign_epi8(y1, w1);
        }
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, y0), sc0);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, y1), sc1);
        isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(p0, p1));
      }
    }
  }
};

#endif

inline constexpr int kSuperColsPerPass = SuperIsa::kColsPerPass;

// R weight rows against C activation columns over nsb super-blocks.
template <class T, int R, int C>
void SuperTile(int64_t nsb, const char* a, size_t a_stride, const void* const* b, float* const* c) {
  using Isa = SuperIsa;
  const Isa::Consts consts = Isa::MakeConsts();
  typename Isa::Acc acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) acc[r][j] = Isa::Zero();
  }
  const auto y = ActColumns<ActQ8K, C>(b);
  for (int64_t i = 0; i < nsb; ++i) {
    for (int r = 0; r < R; ++r) {
      const auto& x = reinterpret_cast<const typename T::Block*>(a + r * a_stride)[i];
      const SuperScales s = T::GetScales(x);
      typename Isa::Ints isum[C];
      Isa::template BlockDots<T, C>(x, s, y.data(), i, consts, isum);
      for (int j = 0; j < C; ++j) {
        const ActQ8K& yj = y[j][i];
        acc[r][j] = Isa::AddScaled(isum[j], s.d * yj.d, acc[r][j]);
        if (T::kHasMins) {
          const __m256i m = _mm256_madd_epi16(
              s.min16, _mm256_load_si256(reinterpret_cast<const __m256i*>(yj.bsums)));
          acc[r][j] = Isa::SubScaled(m, s.dmin * yj.d, acc[r][j]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) c[j][r] = Isa::Reduce(acc[r][j]);
  }
}

// One register tile of super-block type T for QuantTile.
template <class T>
inline constexpr auto kSuperTile = [](auto rows, auto cols, int64_t k, const char* a,
                                      size_t a_stride, const void* const* b, float* const* c) {
  SuperTile<T, decltype(rows)::value, decltype(cols)::value>(k / kQK_K, a, a_stride, b, c);
};

// The kernel set of a super-block type T.
template <class T>
constexpr DotKernels SuperBlockKernels() {
  return {ActQ8KFromF32, ActQ8KRowBytes, QuantTile<kSuperColsPerPass, decltype(kSuperTile<T>)>, 1};
}

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_VEC_DOT_SUPERBLOCK_H_
