// SIMD dot kernels for Q6_K weights against Q8_K-quantized activations.
//
// A Q6_K quant is 4 low bits (ql) and 2 high bits (qh) minus 32, with an int8 scale per 16
// weights. The quants are assembled as unsigned bytes 0..63 (so maddubs can take them), q . y
// is scaled per 16 in integers, and the -32 offset is applied once per super-block through
// the activations' 16-element sums (bsums, as in BlockQ8_K).

#include "backends/cpu/kernels/vec_dot_simd.h"
#include "backends/cpu/kernels/vec_dot_superblock.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

constexpr int kQ6Offset = 32;    // Q6_K quants are stored as q + 32.
constexpr int kOffsetShift = 5;  // multiplying by kQ6Offset.
static_assert(1 << kOffsetShift == kQ6Offset);
#if defined(TG_CPU_AVX512)
struct Q6Consts {
  SuperIndex scale_idx;  // int16 lane -> scale of its group, per 64-quant register.
  __m512i shl_low;       // qh bits 0-1 / 2-3 up to bits 4-5.
  __m512i shr_high;      // qh bits 4-5 / 6-7 to bits 4-5.
};

Q6Consts MakeQ6Consts() {
  Q6Consts c;
  c.scale_idx = MakeSuperIndex();
  alignas(64) int16_t shl[32], shr[32];
  for (int l = 0; l < 32; ++l) {
    shl[l] = l < 16 ? 4 : 2;
    shr[l] = l < 16 ? 0 : 2;
  }
  c.shl_low = _mm512_load_si512(shl);
  c.shr_high = _mm512_load_si512(shr);
  return c;
}

template <int R, int C>
void Q6KTile(int64_t nsb, const char* a, size_t a_stride, const void* const* b, float* const* c) {
  static const Q6Consts kConsts = MakeQ6Consts();
  const Q6Consts k = kConsts;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  constexpr int kOr = 0xEA;  // ternary logic (a & b) | c.
  __m512 acc[R][C] = {};
  const auto y = ActColumns<ActQ8K, C>(b);
  for (int64_t i = 0; i < nsb; ++i) {
    for (int r = 0; r < R; ++r) {
      const BlockQ6_K* x = reinterpret_cast<const BlockQ6_K*>(a + r * a_stride) + i;
      __m512i w[4];
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
        const __m512i qh = BroadcastBytes32(x->qh + 32 * h);
        const __m512i hl = _mm512_and_si512(_mm512_sllv_epi16(qh, k.shl_low), bits45);
        const __m512i hh = _mm512_and_si512(_mm512_srlv_epi16(qh, k.shr_high), bits45);
        w[2 * h] = _mm512_ternarylogic_epi32(ql, low4, hl, kOr);
        w[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), low4, hh, kOr);
      }
      const __m256i s16 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x->scales)));
      __m512i sc[4];
      for (int v = 0; v < 4; ++v) {
        sc[v] = _mm512_permutexvar_epi16(k.scale_idx.idx[v], _mm512_castsi256_si512(s16));
      }
      const float d = _cvtsh_ss(x->d);
      for (int j = 0; j < C; ++j) {
        const ActQ8K& yj = y[j][i];
        // Start from -32 * (scales . bsums): the offset the unsigned quants over-count.
        const __m256i offset = _mm256_slli_epi32(
            _mm256_madd_epi16(s16, _mm256_load_si256(reinterpret_cast<const __m256i*>(yj.bsums))),
            kOffsetShift);
        __m512i isum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(offset));
        for (int v = 0; v < 4; ++v) {
          const __m512i p = _mm512_maddubs_epi16(w[v], _mm512_load_si512(yj.qs + 64 * v));
          isum = _mm512_dpwssd_epi32(isum, p, sc[v]);
        }
        acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * yj.d), acc[r][j]);
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

// The int8 scales of groups 2s and 2s + 1 (elements 32 s .. 32 s + 31) widened to int16, the
// first in the low 128-bit lane and the second in the high: a 32-quant vector's pair sums
// (VPMADDUBSW) meet their group's scale in one VPMADDWD.
inline __m256i QuarterScales(__m128i scales, int s) {
  const __m128i idx = _mm_add_epi8(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                   _mm_set1_epi8(static_cast<char>(2 * s)));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, idx));
}

// Each lane adds its share of a super-block's integer dot, scaled by d * d_y, to its own f32
// sum; the lanes are added once at the end of the row. Every R x C tile adds in this order
// (batch invariance).
template <int R, int C>
void Q6KTile(int64_t nsb, const char* a, size_t a_stride, const void* const* b, float* const* c) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256 acc[R][C] = {};
  const auto y = ActColumns<ActQ8K, C>(b);
  for (int64_t i = 0; i < nsb; ++i) {
    for (int r = 0; r < R; ++r) {
      const BlockQ6_K* x = reinterpret_cast<const BlockQ6_K*>(a + r * a_stride) + i;
      if constexpr (R == 1) PrefetchStreamAhead<sizeof(BlockQ6_K)>(x);
      const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x->scales));
      const __m256i sc16 = _mm256_cvtepi8_epi16(scales);
      __m256i isum[C];
      for (int j = 0; j < C; ++j) {
        // Start from -32 * (scales . bsums): what the unsigned quants over-count.
        const __m256i offset = _mm256_madd_epi16(
            sc16, _mm256_load_si256(reinterpret_cast<const __m256i*>(y[j][i].bsums)));
        isum[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, kOffsetShift));
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->ql + 64 * h));
        const __m256i ql1 =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qh + 32 * h));
        // Quarter t (elements 128 h + 32 t ..): ql's low nibbles (t < 2) or high ones, and
        // qh's bits 2t, 2t + 1 moved to bits 4-5.
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(ql0, low4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
            _mm256_or_si256(_mm256_and_si256(ql1, low4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                            _mm256_and_si256(qh, bits45)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45))};
        for (int t = 0; t < 4; ++t) {
          const __m256i sc = QuarterScales(scales, 4 * h + t);
          for (int j = 0; j < C; ++j) {
            const __m256i yq = _mm256_load_si256(
                reinterpret_cast<const __m256i*>(y[j][i].qs + 128 * h + 32 * t));
            isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q[t], yq), sc));
          }
        }
      }
      const float d = _cvtsh_ss(x->d);
      for (int j = 0; j < C; ++j) {
        acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_set1_ps(d * y[j][i].d),
                                    acc[r][j]);
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
constexpr auto kQ6KTile = [](auto rows, auto cols, int64_t k, const char* a, size_t a_stride,
                             const void* const* b, float* const* c) {
  Q6KTile<decltype(rows)::value, decltype(cols)::value>(k / kQK_K, a, a_stride, b, c);
};

}  // namespace

const DotKernels kDotQ6_K{ActQ8KFromF32, ActQ8KRowBytes,
                          QuantTileByRows<kPasses, decltype(kQ6KTile)>, 1};

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
