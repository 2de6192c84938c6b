// SIMD dot kernels for IQ4_XS weights against Q8_K activations (vec_dot_superblock.h):
// nibbles index the 16 signed IQ4_NL levels (a pshufb lookup), with a 6-bit signed scale per
// 32. The levels reach 127 in magnitude, so the kernel multiplies |w| by y carrying w's sign.
#include <cstring>

#include "backends/cpu/kernels/vec_dot_superblock.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

constexpr int kScaleOffset = 32;  // 6-bit scales are stored + 32.
constexpr int kSubBlocks = kQK_K / 32;

// The 8 stored scales (0..63) as bytes: the low 4 bits are nibble j of scales_l, the high 2
// bits bits 2 j, 2 j + 1 of scales_h.
inline uint64_t StoredScales(const BlockIQ4_XS& x) {
  uint32_t low;
  std::memcpy(&low, x.scales_l, sizeof(low));
#if defined(__BMI2__)
  return _pdep_u64(low, 0x0F0F0F0F0F0F0F0Full) | _pdep_u64(x.scales_h, 0x3030303030303030ull);
#else
  uint64_t out = 0;
  for (int j = 0; j < kSubBlocks; ++j) {
    const uint64_t s = ((low >> (4 * j)) & 0x0F) | (((x.scales_h >> (2 * j)) & 3) << 4);
    out |= s << (8 * j);
  }
  return out;
#endif
}

struct IQ4XSType {
  using Block = BlockIQ4_XS;
  static constexpr bool kSigned = true;
  static constexpr bool kHasMins = false;

  static SuperScales GetScales(const Block& x) {
    const __m256i sc16 =
        _mm256_sub_epi16(PairsToGroups(StoredScales(x), false), _mm256_set1_epi16(kScaleOffset));
    return {_cvtsh_ss(x.d), 0.0f, sc16, _mm256_setzero_si256()};
  }

  static __m128i Levels() {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues));
  }

#if defined(TG_CPU_AVX512)
  // Register v holds sub-blocks 2 v and 2 v + 1: the low then the high nibbles of
  // qs[32 v .. 32 v + 15], then those of qs[32 v + 16 ..].
  static void Weights(const Block& x, __m512i w[4]) {
    const __m512i table = _mm512_broadcast_i32x4(Levels());
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i shift = _mm512_setr_epi64(0, 0, 0x0004000400040004, 0x0004000400040004, 0, 0,
                                            0x0004000400040004, 0x0004000400040004);
    for (int v = 0; v < 4; ++v) {
      const __m512i q = BroadcastBytes32(x.qs + 32 * v);
      const __m512i spread = _mm512_shuffle_i64x2(q, q, _MM_SHUFFLE(1, 1, 0, 0));
      w[v] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi16(spread, shift), low4));
    }
  }
#else
  static void Weights(const Block& x, int h, __m256i* w0, __m256i* w1) {
    const __m256i table = _mm256_broadcastsi128_si256(Levels());
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * h));
    const __m256i lo = _mm256_and_si256(q, low4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    *w0 = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20));
    *w1 = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31));
  }
#endif
};

}  // namespace

const DotKernels kDotIQ4_XS = SuperBlockKernels<IQ4XSType>();

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
