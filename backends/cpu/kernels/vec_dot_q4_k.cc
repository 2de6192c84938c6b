// SIMD dot kernels for Q4_K weights against Q8_K-quantized activations.
//
// A Q4_K super-block (256 weights) has one f16 scale pair and 8 sub-blocks of 32 with 6-bit
// scales and mins: x = d * sc_j * q - dmin * m_j. So q . y is taken per sub-block in integers
// (maddubs, then a multiply-add with the replicated 6-bit scales), and the mins only need the
// sums of y per sub-block, precomputed with the activations. The activation quants are stored
// with their sub-blocks in the order the weight nibbles unpack to (0,2,1,3,4,6,5,7: the low
// nibbles of 64 bytes are sub-blocks 2j and 2j+2, the high ones 2j+1 and 2j+3), so that no
// shuffle is needed in the loop.
#include <cstring>

#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/vec_dot_simd.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

constexpr int kSubBlock = 32;
constexpr int kSubBlocks = kQK_K / kSubBlock;  // 8

// Q8_K activations for Q4_K weights.
struct alignas(64) ActQ4K {
  int8_t qs[kQK_K];          // sub-blocks in the order 0,2,1,3,4,6,5,7.
  int16_t sums[kSubBlocks];  // sum of each sub-block's quants, natural order.
  float d;
};
static_assert(sizeof(ActQ4K) == 320);

// Where sub-block s lives in ActQ4K::qs (in units of 32 quants).
constexpr int StoredPosition(int s) { return (s & ~3) | ((s & 1) << 1) | ((s >> 1) & 1); }

size_t ActRowBytes(int64_t k) { return static_cast<size_t>(k / kQK_K) * sizeof(ActQ4K); }

void FromF32(const float* x, void* y, int64_t k) {
  ActQ4K* out = static_cast<ActQ4K*>(y);
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    int8_t q[kQK_K];
    out[i].d = QuantizeBlockQ8_K(x + i * kQK_K, q);
    for (int s = 0; s < kSubBlocks; ++s) {
      std::memcpy(out[i].qs + StoredPosition(s) * kSubBlock, q + s * kSubBlock, kSubBlock);
      out[i].sums[s] = static_cast<int16_t>(SumI8(q + s * kSubBlock, kSubBlock));
    }
  }
}

// dmin * (mins . y sums) for one super-block, as 4 int32 lanes to sum.
inline __m128i MinTerms(uint64_t mins, const ActQ4K& y) {
  const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mins)));
  return _mm_madd_epi16(m16, _mm_load_si128(reinterpret_cast<const __m128i*>(y.sums)));
}

#if defined(TG_CPU_AVX512)
// int16 lane -> scale index for each 64-quant register: [sub-block 2j | 2j+2] and so on.
struct ScaleIndex {
  __m512i idx[4];
};

ScaleIndex MakeScaleIndex() {
  ScaleIndex s;
  constexpr int kFirst[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  for (int v = 0; v < 4; ++v) {
    alignas(64) int16_t lanes[32];
    for (int l = 0; l < 32; ++l) lanes[l] = static_cast<int16_t>(kFirst[v][l / 16]);
    s.idx[v] = _mm512_load_si512(lanes);
  }
  return s;
}

template <int R, int C>
void Q4KTile(int64_t nsb, const char* a, size_t a_stride, const void* const* b, float* const* c) {
  static const ScaleIndex kIndex = MakeScaleIndex();
  const ScaleIndex index = kIndex;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R][C] = {};
  const auto y = ActColumns<ActQ4K, C>(b);
  for (int64_t i = 0; i < nsb; ++i) {
    for (int r = 0; r < R; ++r) {
      const BlockQ4_K* x = reinterpret_cast<const BlockQ4_K*>(a + r * a_stride) + i;
      uint64_t scales, mins;
      UnpackScalesK4(x->scales, &scales, &mins);
      const __m512i s16 = _mm512_castsi128_si512(
          _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(scales))));
      __m512i w[4], sc[4];
      const __m512i q0 = _mm512_loadu_si512(x->qs);
      const __m512i q1 = _mm512_loadu_si512(x->qs + 64);
      w[0] = _mm512_and_si512(q0, low4);
      w[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4);
      w[2] = _mm512_and_si512(q1, low4);
      w[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4);
      for (int v = 0; v < 4; ++v) sc[v] = _mm512_permutexvar_epi16(index.idx[v], s16);
      const float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
      for (int j = 0; j < C; ++j) {
        const ActQ4K& yj = y[j][i];
        __m512i isum = _mm512_setzero_si512();
        for (int v = 0; v < 4; ++v) {
          const __m512i p = _mm512_maddubs_epi16(w[v], _mm512_load_si512(yj.qs + 64 * v));
          isum = _mm512_dpwssd_epi32(isum, p, sc[v]);
        }
        const __m512 mterm = _mm512_zextps128_ps512(_mm_cvtepi32_ps(MinTerms(mins, yj)));
        acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * yj.d), acc[r][j]);
        acc[r][j] = _mm512_fnmadd_ps(mterm, _mm512_set1_ps(dmin * yj.d), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) c[j][r] = _mm512_reduce_add_ps(acc[r][j]);
  }
}

// Columns per pass for 1..4 rows: one row (decode streams weight rows one at a time) takes 8
// columns per unpacking of its super-blocks.
constexpr ColumnPasses kPasses{{8, 4, 4, 4}};
#else  // AVX2

template <int R, int C>
void Q4KTile(int64_t nsb, const char* a, size_t a_stride, const void* const* b, float* const* c) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[R][C] = {};
  const auto y = ActColumns<ActQ4K, C>(b);
  for (int64_t i = 0; i < nsb; ++i) {
    for (int r = 0; r < R; ++r) {
      const BlockQ4_K* x = reinterpret_cast<const BlockQ4_K*>(a + r * a_stride) + i;
      uint64_t scales, mins;
      UnpackScalesK4(x->scales, &scales, &mins);
      uint8_t sc[kSubBlocks];
      std::memcpy(sc, &scales, sizeof(sc));
      const float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
      __m256i isum[C];
      for (int j = 0; j < C; ++j) isum[j] = _mm256_setzero_si256();
      for (int h = 0; h < kQK_K / 64; ++h) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs + 32 * h));
        const __m256i lo = _mm256_and_si256(q, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        const __m256i sc_lo = _mm256_set1_epi16(sc[2 * h]);
        const __m256i sc_hi = _mm256_set1_epi16(sc[2 * h + 1]);
        const int pos_lo = StoredPosition(2 * h) * kSubBlock;
        const int pos_hi = StoredPosition(2 * h + 1) * kSubBlock;
        for (int j = 0; j < C; ++j) {
          const __m256i ylo =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(y[j][i].qs + pos_lo));
          const __m256i yhi =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(y[j][i].qs + pos_hi));
          const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), sc_lo);
          const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), sc_hi);
          isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(plo, phi));
        }
      }
      for (int j = 0; j < C; ++j) {
        const __m256 mterm = _mm256_castps128_ps256(_mm_cvtepi32_ps(MinTerms(mins, y[j][i])));
        const __m256 mzero = _mm256_insertf128_ps(mterm, _mm_setzero_ps(), 1);
        acc[r][j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_set1_ps(d * y[j][i].d), acc[r][j]);
        acc[r][j] = _mm256_fnmadd_ps(mzero, _mm256_set1_ps(dmin * y[j][i].d), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) c[j][r] = HorizontalSum(acc[r][j]);
  }
}

constexpr ColumnPasses kPasses{{2, 2, 2, 2}};  // 16 ymm registers.
#endif

// One register tile for QuantTile.
constexpr auto kQ4KTile = [](auto rows, auto cols, int64_t k, const char* a, size_t a_stride,
                             const void* const* b, float* const* c) {
  Q4KTile<decltype(rows)::value, decltype(cols)::value>(k / kQK_K, a, a_stride, b, c);
};

}  // namespace

const DotKernels kDotQ4_K{FromF32, ActRowBytes, QuantTileByRows<kPasses, decltype(kQ4KTile)>, 1};

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
