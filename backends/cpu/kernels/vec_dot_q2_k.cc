// SIMD dot kernels for Q2_K weights against Q8_K activations (vec_dot_superblock.h): 2-bit
// quants with a 4-bit scale and a 4-bit min per group of 16.
#include "backends/cpu/kernels/vec_dot_superblock.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

struct Q2KType {
  using Block = BlockQ2_K;
  static constexpr bool kSigned = false;
  static constexpr bool kHasMins = true;

  static SuperScales GetScales(const Block& x) {
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    return {_cvtsh_ss(x.d), _cvtsh_ss(x.dmin), _mm256_cvtepu8_epi16(_mm_and_si128(v, low4)),
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), low4))};
  }

#if defined(TG_CPU_AVX512)
  // Register v: the 2-bit fields at bits 2 (2 v % 4) and 2 (2 v % 4) + 2 of qs[32 (v / 2)..].
  static void Weights(const Block& x, __m512i w[4]) {
    const __m512i low2 = _mm512_set1_epi8(3);
    for (int v = 0; v < 4; ++v) {
      const __m512i q = BroadcastBytes32(x.qs + 32 * (v / 2));
      const int s = 2 * (v % 2);
      const __m512i shift = HalfShifts(2 * s, 2 * s + 2);
      w[v] = _mm512_and_si512(_mm512_srlv_epi16(q, shift), low2);
    }
  }
#else
  static void Weights(const Block& x, int h, __m256i* w0, __m256i* w1) {
    const __m256i low2 = _mm256_set1_epi8(3);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * (h / 2)));
    const int s = 2 * (h % 2);
    *w0 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), low2);
    *w1 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s + 2), low2);
  }
#endif
};

}  // namespace

const DotKernels kDotQ2_K = SuperBlockKernels<Q2KType>();

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
