// SIMD dot kernels for Q5_K weights against Q8_K activations (vec_dot_superblock.h): Q4_K's
// layout (6-bit scales and mins per 32) with a fifth bit per quant from qh, so the quants are
// assembled as unsigned bytes 0..31.
#include "backends/cpu/kernels/vec_dot_superblock.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

constexpr int kFifthBitShift = 4;

struct Q5KType {
  using Block = BlockQ5_K;
  static constexpr bool kSigned = false;
  static constexpr bool kHasMins = true;

  static SuperScales GetScales(const Block& x) {
    uint64_t scales, mins;
    UnpackScalesK4(x.scales, &scales, &mins);
    return {_cvtsh_ss(x.d), _cvtsh_ss(x.dmin), PairsToGroups(scales, false),
            PairsToGroups(mins, false)};
  }

#if defined(TG_CPU_AVX512)
  // Register v holds sub-blocks 2 v (low nibbles of qs[32 v..]) and 2 v + 1 (high nibbles);
  // their fifth bits are bits 2 v and 2 v + 1 of qh.
  static void Weights(const Block& x, __m512i w[4]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i one = _mm512_set1_epi8(1);
    const __m512i nib_shift = HalfShifts(0, 4);
    const __m512i qh = BroadcastBytes32(x.qh);
    for (int v = 0; v < 4; ++v) {
      const __m512i q = BroadcastBytes32(x.qs + 32 * v);
      const __m512i bit_shift = HalfShifts(2 * v, 2 * v + 1);
      const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(q, nib_shift), low4);
      const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(qh, bit_shift), one);
      w[v] = _mm512_or_si512(nib, _mm512_slli_epi16(high, kFifthBitShift));
    }
  }
#else
  static void Weights(const Block& x, int h, __m256i* w0, __m256i* w1) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i fifth = _mm256_set1_epi8(0x10);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * h));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh));
    // Bit b of qh moved to bit 4 of each byte.
    const __m256i h0 =
        _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * h), kFifthBitShift), fifth);
    const __m256i h1 = _mm256_and_si256(
        _mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * h + 1), kFifthBitShift), fifth);
    *w0 = _mm256_or_si256(_mm256_and_si256(q, low4), h0);
    *w1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), h1);
  }
#endif
};

}  // namespace

const DotKernels kDotQ5_K = SuperBlockKernels<Q5KType>();

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
