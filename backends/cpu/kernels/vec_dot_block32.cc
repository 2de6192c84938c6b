// SIMD dot kernels for the 32-element block types with one scale per block, against
// Q8_0-quantized activations (ggml's vec_dot_type for all four): Q5_0 and Q5_1 (a nibble plus
// a fifth bit from a 32-bit mask), IQ4_NL and MXFP4 (a nibble indexing a table of 16 levels).
//
// One block becomes one vector of 32 weight bytes, which then meets each column's quants as
// Q8_0 does. Unsigned weights (Q5_0's q + 16, Q5_1's q, MXFP4's level + 12) multiply with
// VPDPBUSD / maddubs directly, their zero point seeding the block's integer dot from the
// activation's quant sum; IQ4_NL's levels reach 127 in magnitude and go through the sign trick
// (DotI8Lanes). Q5_1's minimum adds m * d_y * sum(q_y) per block.
#include <cstring>

#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/vec_dot_simd.h"
#include "core/quants.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

// Q8_0 activations with the f32 scale and the sum of the quants.
struct ActQ8S {
  int8_t qs[kQK8_0];
  float d;
  int32_t sum;
};
static_assert(sizeof(ActQ8S) == 40);

size_t ActRowBytes(int64_t k) { return static_cast<size_t>(k / kQK8_0) * sizeof(ActQ8S); }

void FromF32(const float* x, void* y, int64_t k) {
  ActQ8S* out = static_cast<ActQ8S*>(y);
  for (int64_t i = 0; i < k / kQK8_0; ++i) {
    out[i].d = QuantizeBlockQ8_0(x + i * kQK8_0, out[i].qs);
    out[i].sum = SumI8(out[i].qs, kQK8_0);
  }
}

// The fifth bits of a Q5 block (bit j of qh for element j) as 0x10 in byte j.
inline __m256i FifthBits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  constexpr char kFifth = 0x10;
#if defined(TG_CPU_AVX512)
  return _mm256_maskz_set1_epi8(qh, kFifth);
#else
  // Byte j of each 128-bit lane takes qh's byte j / 8 (lane 1: 2 + j / 8), then its bit j % 8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(qh)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(kFifth));
#endif
}

// Per-type unpacking: Weights() gives the block's 32 weight bytes in element order, with
// value = dw * (w - kOffset) (+ mw when kHasMin).
// Q5_0 and Q5_1: a nibble plus the fifth bit; they differ in the zero point and the minimum.
template <class B>
struct Q5Parts {
  using Block = B;
  static constexpr bool kSigned = false;
  struct Consts {};
  static Consts MakeConsts() { return {}; }
  static __m256i Weights(const Block& x, const Consts&) {
    return _mm256_or_si256(NibblesToBytes(x.qs), FifthBits(x.qh));
  }
  static float Scale(const Block& x) { return _cvtsh_ss(x.d); }
};

struct Q5_0Type : Q5Parts<BlockQ5_0> {
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 16;
  static float Min(const Block&) { return 0.0f; }
};

struct Q5_1Type : Q5Parts<BlockQ5_1> {
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;
  static float Min(const Block& x) { return _cvtsh_ss(x.m); }
};

struct IQ4_NLType {
  using Block = BlockIQ4_NL;
  static constexpr bool kSigned = true;  // levels -127..113: maddubs would saturate unsigned.
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 0;
  struct Consts {
    __m256i table;
  };
  static Consts MakeConsts() { return {LevelTable(kIQ4NLValues, 0)}; }
  static __m256i Weights(const Block& x, const Consts& c) {
    return _mm256_shuffle_epi8(c.table, NibblesToBytes(x.qs));
  }
  static float Scale(const Block& x) { return _cvtsh_ss(x.d); }
  static float Min(const Block&) { return 0.0f; }
};

struct MXFP4Type {
  using Block = BlockMXFP4;
  static constexpr bool kSigned = false;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 12;  // levels -12..12 stored + 12.
  struct Consts {
    __m256i table;
  };
  static Consts MakeConsts() { return {LevelTable(kMXFP4Values, kOffset)}; }
  static __m256i Weights(const Block& x, const Consts& c) {
    return _mm256_shuffle_epi8(c.table, NibblesToBytes(x.qs));
  }
  static float Scale(const Block& x) { return E8M0ToFloatHalf(x.e); }
  static float Min(const Block&) { return 0.0f; }
};

// The minimum's share of one lane: m * d_y * sum(q_y) is added to all 8 lanes of the block's
// accumulator as a vector FMA, each lane taking an eighth (exact: a power of two).
constexpr float kLaneShare = 1.0f / 8;

template <class T, int R, int C>
void BlockTile(int64_t nblocks, const char* a, size_t a_stride, const void* const* b,
               float* const* c) {
  static const typename T::Consts kConsts = T::MakeConsts();
  const typename T::Consts consts = kConsts;
  __m256 acc[R][C] = {};
  const auto y = ActColumns<ActQ8S, C>(b);
  for (int64_t i = 0; i < nblocks; ++i) {
    using Block = typename T::Block;
    if constexpr (R == 1) PrefetchStreamAhead<sizeof(Block)>(a + i * sizeof(Block));
    __m256i yq[C], seed[C];
    __m256 dy[C], ds[C];
    for (int j = 0; j < C; ++j) {
      yq[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[j][i].qs));
      dy[j] = _mm256_set1_ps(y[j][i].d);
      // The zero point over-counts kOffset * sum(q_y); lane 0 starts that much lower.
      seed[j] = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-T::kOffset * y[j][i].sum));
      if (T::kHasMin)
        ds[j] = _mm256_set1_ps(y[j][i].d * static_cast<float>(y[j][i].sum) * kLaneShare);
    }
    for (int r = 0; r < R; ++r) {
      const auto& x = reinterpret_cast<const typename T::Block*>(a + r * a_stride)[i];
      const __m256i w = T::Weights(x, consts);
      const __m256 dx = _mm256_set1_ps(T::Scale(x));
      const __m256 mx = T::kHasMin ? _mm256_set1_ps(T::Min(x)) : _mm256_setzero_ps();
      for (int j = 0; j < C; ++j) {
        const __m256i p = T::kSigned ? DotI8Lanes(w, yq[j]) : DotU8I8Lanes(seed[j], w, yq[j]);
        acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dx, dy[j]), acc[r][j]);
        if (T::kHasMin) acc[r][j] = _mm256_fmadd_ps(mx, ds[j], acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) c[j][r] = HorizontalSum(acc[r][j]);
  }
}

#if defined(TG_CPU_AVX512)
constexpr int kColsPerPass = 4;
#else
constexpr int kColsPerPass = 2;  // 16 ymm registers: 2 columns keep the accumulators in them.
#endif

// One register tile of type T for QuantTile.
template <class T>
constexpr auto kBlockTile = [](auto rows, auto cols, int64_t k, const char* a, size_t a_stride,
                               const void* const* b, float* const* c) {
  BlockTile<T, decltype(rows)::value, decltype(cols)::value>(k / kQK8_0, a, a_stride, b, c);
};

template <class T>
constexpr DotKernels kBlockKernels{FromF32, ActRowBytes,
                                   QuantTile<kColsPerPass, decltype(kBlockTile<T>)>, 1};

}  // namespace

const DotKernels kDotQ5_0 = kBlockKernels<Q5_0Type>;
const DotKernels kDotQ5_1 = kBlockKernels<Q5_1Type>;
const DotKernels kDotIQ4_NL = kBlockKernels<IQ4_NLType>;
#if defined(TG_CPU_AVX512)  // AVX2: vec_dot_mxfp4.cc.
const DotKernels kDotMXFP4 = kBlockKernels<MXFP4Type>;
#endif

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
