// SIMD dot kernels for Q3_K weights against Q8_K activations (vec_dot_superblock.h). A Q3_K
// quant q in -4..3 is stored as its two low bits (qs) plus a high bit (hmask) that is set for
// q >= 0, so low | high << 2 is exactly q + 4: the kernel multiplies those unsigned bytes and
// takes the offset back through the mins term, 4 * scale_g * sum(y_g).
#include <cstring>

#include "backends/cpu/kernels/vec_dot_superblock.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

constexpr int kScaleOffset = 32;      // 6-bit scales are stored + 32.
constexpr int kQuantOffsetShift = 2;  // the stored quants are q + 4.

struct Q3KType {
  using Block = BlockQ3_K;
  static constexpr bool kSigned = false;
  static constexpr bool kHasMins = true;

  // The 16 six-bit scales (low nibbles in bytes 0-7, two high bits each in bytes 8-11),
  // rearranged four groups per 32-bit word as ggml does.
  static SuperScales GetScales(const Block& x) {
    constexpr uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
    uint32_t u[3];
    std::memcpy(u, x.scales, sizeof(u));
    const __m128i packed =
        _mm_setr_epi32(static_cast<int32_t>((u[0] & kLow4) | ((u[2] & kLow2) << 4)),
                       static_cast<int32_t>((u[1] & kLow4) | (((u[2] >> 2) & kLow2) << 4)),
                       static_cast<int32_t>(((u[0] >> 4) & kLow4) | (((u[2] >> 4) & kLow2) << 4)),
                       static_cast<int32_t>(((u[1] >> 4) & kLow4) | (((u[2] >> 6) & kLow2) << 4)));
    const __m256i sc16 =
        _mm256_sub_epi16(_mm256_cvtepu8_epi16(packed), _mm256_set1_epi16(kScaleOffset));
    const float d = _cvtsh_ss(x.d);
    return {d, d, sc16, _mm256_slli_epi16(sc16, kQuantOffsetShift)};
  }

#if defined(TG_CPU_AVX512)
  // Register v holds chunks 2 v and 2 v + 1 (32 elements each): the 2-bit fields at bits
  // 2 (2 v % 4) and 2 (2 v % 4) + 2 of qs[32 (v / 2)..], high bits 2 v and 2 v + 1 of hmask.
  static void Weights(const Block& x, __m512i w[4]) {
    const __m512i low2 = _mm512_set1_epi8(3);
    const __m512i one = _mm512_set1_epi8(1);
    const __m512i hm = BroadcastBytes32(x.hmask);
    for (int v = 0; v < 4; ++v) {
      const __m512i q = BroadcastBytes32(x.qs + 32 * (v / 2));
      const int s = 2 * (v % 2);
      const __m512i q_shift = HalfShifts(2 * s, 2 * s + 2);
      const __m512i h_shift = HalfShifts(2 * v, 2 * v + 1);
      const __m512i low = _mm512_and_si512(_mm512_srlv_epi16(q, q_shift), low2);
      const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(hm, h_shift), one);
      w[v] = _mm512_or_si512(low, _mm512_slli_epi16(high, 2));
    }
  }
#else
  static void Weights(const Block& x, int h, __m256i* w0, __m256i* w1) {
    const __m256i low2 = _mm256_set1_epi8(3);
    const __m256i bit2 = _mm256_set1_epi8(4);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * (h / 2)));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.hmask));
    const int s = 2 * (h % 2);
    const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hm, 2 * h), 2), bit2);
    const __m256i h1 =
        _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hm, 2 * h + 1), 2), bit2);
    *w0 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), low2), h0);
    *w1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s + 2), low2), h1);
  }
#endif
};

}  // namespace

const DotKernels kDotQ3_K = SuperBlockKernels<Q3KType>();

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
