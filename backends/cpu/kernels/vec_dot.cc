// The portable dot kernels (namespace scalar, always compiled: the fallback on CPUs without
// AVX2 and the yardstick the tests hold the SIMD kernels to) and the choice of kernel set.
// Scalar activations use the reference formats (BlockQ8_0 / BlockQ8_K from core/quants.h).
#include "backends/cpu/kernels/vec_dot.h"

#include <atomic>

#include "backends/cpu/kernels/vec_dot_simd.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quants.h"

namespace tg::cpu {
namespace scalar {
namespace {

constexpr int kQ4Offset = 8;   // Q4_0 quants are stored as q + 8.
constexpr int kQ6Offset = 32;  // Q6_K quants are stored as q + 32.
constexpr int kQ4KSub = 32;    // elements per Q4_K sub-block.
constexpr int kQ6KGroup = 16;  // elements per Q6_K scale.

size_t F32RowBytes(int64_t k) { return static_cast<size_t>(k) * sizeof(float); }
size_t Q8_0RowBytes(int64_t k) { return static_cast<size_t>(k / kQK8_0) * sizeof(BlockQ8_0); }
size_t Q8_KRowBytes(int64_t k) { return static_cast<size_t>(k / kQK_K) * sizeof(BlockQ8_K); }

void FromF32Q8_0(const float* x, void* y, int64_t k) {
  QuantizeRowQ8_0(x, static_cast<BlockQ8_0*>(y), k);
}
void FromF32Q8_K(const float* x, void* y, int64_t k) {
  QuantizeRowQ8_K(x, static_cast<BlockQ8_K*>(y), k);
}

float Identity(float v) { return v; }

// Float dots accumulate in double: the scalar path is the accuracy yardstick, not a fast path.
// a holds k elements of T (kToFloat widens one), b k floats.
template <typename T, float (*kToFloat)(T)>
float DotFloat(int64_t k, const void* a, const void* b) {
  const T* x = static_cast<const T*>(a);
  const float* y = static_cast<const float*>(b);
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) sum += static_cast<double>(kToFloat(x[i])) * y[i];
  return static_cast<float>(sum);
}

float DotQ8_0(int64_t k, const void* a, const void* b) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(a);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(b);
  float sum = 0.0f;
  for (int64_t i = 0; i < k / kQK8_0; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += x[i].qs[j] * y[i].qs[j];
    sum += HalfToFloat(x[i].d) * HalfToFloat(y[i].d) * static_cast<float>(isum);
  }
  return sum;
}

float DotQ4_0(int64_t k, const void* a, const void* b) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(a);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(b);
  constexpr int kHalf = kQK4_0 / 2;
  float sum = 0.0f;
  for (int64_t i = 0; i < k / kQK4_0; ++i) {
    int isum = 0;
    for (int j = 0; j < kHalf; ++j) {
      isum += ((x[i].qs[j] & 0x0F) - kQ4Offset) * y[i].qs[j];
      isum += ((x[i].qs[j] >> 4) - kQ4Offset) * y[i].qs[j + kHalf];
    }
    sum += HalfToFloat(x[i].d) * HalfToFloat(y[i].d) * static_cast<float>(isum);
  }
  return sum;
}

// The 6-bit scale and min of Q4_K sub-block j (ggml's get_scale_min_k4).
void Q4KScaleMin(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

float DotQ4_K(int64_t k, const void* a, const void* b) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(a);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(b);
  float sum = 0.0f;
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    int sum_scaled = 0;  // sum over sub-blocks of scale * (q . y).
    int sum_mins = 0;    // sum over sub-blocks of min * sum(y).
    for (int j = 0; j < kQK_K / kQ4KSub; ++j) {
      int scale, min;
      Q4KScaleMin(j, x[i].scales, &scale, &min);
      const uint8_t* q = x[i].qs + (j / 2) * kQ4KSub;
      const int shift = (j % 2) * 4;
      const int8_t* yq = y[i].qs + j * kQ4KSub;
      int isum = 0, ysum = 0;
      for (int l = 0; l < kQ4KSub; ++l) {
        isum += ((q[l] >> shift) & 0x0F) * yq[l];
        ysum += yq[l];
      }
      sum_scaled += scale * isum;
      sum_mins += min * ysum;
    }
    sum += y[i].d * (HalfToFloat(x[i].d) * static_cast<float>(sum_scaled) -
                     HalfToFloat(x[i].dmin) * static_cast<float>(sum_mins));
  }
  return sum;
}

// Quant e (0..255) of a Q6_K super-block, minus its offset.
int Q6KQuant(const BlockQ6_K& x, int e) {
  const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
  const uint8_t* ql = x.ql + half * 64 + (quarter % 2) * 32;
  const uint8_t* qh = x.qh + half * 32;
  const int low = quarter < 2 ? (ql[l] & 0x0F) : (ql[l] >> 4);
  const int high = (qh[l] >> (2 * quarter)) & 3;
  return (low | (high << 4)) - kQ6Offset;
}

float DotQ6_K(int64_t k, const void* a, const void* b) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(a);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(b);
  float sum = 0.0f;
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    int sum_scaled = 0;
    for (int g = 0; g < kQK_K / kQ6KGroup; ++g) {
      int isum = 0;
      for (int l = 0; l < kQ6KGroup; ++l) {
        const int e = g * kQ6KGroup + l;
        isum += Q6KQuant(x[i], e) * y[i].qs[e];
      }
      sum_scaled += x[i].scales[g] * isum;
    }
    sum += HalfToFloat(x[i].d) * y[i].d * static_cast<float>(sum_scaled);
  }
  return sum;
}

// Quant e (0..31) of a Q5_0 / Q5_1 block: nibble plus fifth bit, 0..31.
int Q5Quant(const uint8_t* qh, const uint8_t* qs, int e) {
  const int nib = e < 16 ? qs[e] & 0x0F : qs[e - 16] >> 4;
  return nib | (((qh[e / 8] >> (e % 8)) & 1) << 4);
}

// Index e of a 32-element nibble block: element j in the low nibble of byte j, j + 16 high.
int NibbleAt(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0x0F : qs[e - 16] >> 4; }

constexpr int kQ5Offset = 16;  // Q5_0 quants are stored as q + 16.

// The weight of element e (as an integer) and the block's scale and minimum, per type: the
// block holds scale * value(e) + min.
struct Q5_0Block {
  using Block = BlockQ5_0;
  static int Value(const Block& x, int e) { return Q5Quant(x.qh, x.qs, e) - kQ5Offset; }
  static float Scale(const Block& x) { return HalfToFloat(x.d); }
  static float Min(const Block&) { return 0.0f; }
};
struct Q5_1Block {
  using Block = BlockQ5_1;
  static int Value(const Block& x, int e) { return Q5Quant(x.qh, x.qs, e); }
  static float Scale(const Block& x) { return HalfToFloat(x.d); }
  static float Min(const Block& x) { return HalfToFloat(x.m); }
};
struct IQ4_NLBlock {
  using Block = BlockIQ4_NL;
  static int Value(const Block& x, int e) { return kIQ4NLValues[NibbleAt(x.qs, e)]; }
  static float Scale(const Block& x) { return HalfToFloat(x.d); }
  static float Min(const Block&) { return 0.0f; }
};
struct MXFP4Block {
  using Block = BlockMXFP4;
  static int Value(const Block& x, int e) { return kMXFP4Values[NibbleAt(x.qs, e)]; }
  static float Scale(const Block& x) { return E8M0ToFloatHalf(x.e); }
  static float Min(const Block&) { return 0.0f; }
};

// The 32-element block types against Q8_0 activations (Q5_1 too: ggml's Q8_1 holds the same
// quants plus d times their sum, which is what its minimum needs).
template <class T>
float DotBlock32(int64_t k, const void* a, const void* b) {
  const auto* x = static_cast<const typename T::Block*>(a);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(b);
  float sum = 0.0f;
  for (int64_t i = 0; i < k / kQK8_0; ++i) {
    int isum = 0, ysum = 0;
    for (int e = 0; e < kQK8_0; ++e) {
      isum += T::Value(x[i], e) * y[i].qs[e];
      ysum += y[i].qs[e];
    }
    const float dy = HalfToFloat(y[i].d);
    sum += T::Scale(x[i]) * dy * static_cast<float>(isum) +
           T::Min(x[i]) * dy * static_cast<float>(ysum);
  }
  return sum;
}

constexpr int kKGroup = 16;  // elements per scale in Q2_K and Q3_K.

// 2-bit field of element e (Q2_K, Q3_K): byte 32 (e / 128) + e % 32, bits 2 ((e % 128) / 32).
int TwoBitQuant(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// The super-block types: element e's integer value, and the integer scale and min of group g
// of kGroup elements under the f32 super-scales D and DMin, so that the block holds
// D * scale(g) * value(e) - DMin * min(g).
struct Q5_KBlock {
  using Block = BlockQ5_K;
  static constexpr int kGroup = kQ4KSub;
  static int Value(const Block& x, int e) {
    const int nib = (x.qs[(e / 64) * 32 + e % 32] >> (4 * ((e / 32) % 2))) & 0x0F;
    return nib | (((x.qh[e % 32] >> (e / 32)) & 1) << 4);
  }
  static int Scale(const Block& x, int g) {
    int scale, min;
    Q4KScaleMin(g, x.scales, &scale, &min);
    return scale;
  }
  static int Min(const Block& x, int g) {
    int scale, min;
    Q4KScaleMin(g, x.scales, &scale, &min);
    return min;
  }
  static float D(const Block& x) { return HalfToFloat(x.d); }
  static float DMin(const Block& x) { return HalfToFloat(x.dmin); }
};
struct Q3_KBlock {
  using Block = BlockQ3_K;
  static constexpr int kGroup = kKGroup;
  static int Value(const Block& x, int e) {
    return (TwoBitQuant(x.qs, e) | (((x.hmask[e % 32] >> (e / 32)) & 1) << 2)) - 4;
  }
  static int Scale(const Block& x, int g) {
    const int low = g < 8 ? x.scales[g] & 0x0F : x.scales[g - 8] >> 4;
    return (low | (((x.scales[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
  }
  static int Min(const Block&, int) { return 0; }
  static float D(const Block& x) { return HalfToFloat(x.d); }
  static float DMin(const Block&) { return 0.0f; }
};
struct Q2_KBlock {
  using Block = BlockQ2_K;
  static constexpr int kGroup = kKGroup;
  static int Value(const Block& x, int e) { return TwoBitQuant(x.qs, e); }
  static int Scale(const Block& x, int g) { return x.scales[g] & 0x0F; }
  static int Min(const Block& x, int g) { return x.scales[g] >> 4; }
  static float D(const Block& x) { return HalfToFloat(x.d); }
  static float DMin(const Block& x) { return HalfToFloat(x.dmin); }
};
struct IQ4_XSBlock {
  using Block = BlockIQ4_XS;
  static constexpr int kGroup = 32;
  static int Value(const Block& x, int e) {
    return kIQ4NLValues[NibbleAt(x.qs + 16 * (e / 32), e % 32)];
  }
  static int Scale(const Block& x, int g) {
    return (((x.scales_l[g / 2] >> (4 * (g % 2))) & 0x0F) | (((x.scales_h >> (2 * g)) & 3) << 4)) -
           32;
  }
  static int Min(const Block&, int) { return 0; }
  static float D(const Block& x) { return HalfToFloat(x.d); }
  static float DMin(const Block&) { return 0.0f; }
};

template <class T>
float DotSuperBlock(int64_t k, const void* a, const void* b) {
  const auto* x = static_cast<const typename T::Block*>(a);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(b);
  float sum = 0.0f;
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    int sum_scaled = 0, sum_mins = 0;
    for (int g = 0; g < kQK_K / T::kGroup; ++g) {
      int isum = 0, ysum = 0;
      for (int l = 0; l < T::kGroup; ++l) {
        const int e = g * T::kGroup + l;
        isum += T::Value(x[i], e) * y[i].qs[e];
        ysum += y[i].qs[e];
      }
      sum_scaled += T::Scale(x[i], g) * isum;
      sum_mins += T::Min(x[i], g) * ysum;
    }
    sum += y[i].d * (T::D(x[i]) * static_cast<float>(sum_scaled) -
                     T::DMin(x[i]) * static_cast<float>(sum_mins));
  }
  return sum;
}

template <float (*kDot)(int64_t, const void*, const void*)>
void Tile(int64_t k, const void* a, size_t a_stride, int rows, int /*ahead_rows*/,
          const void* const* b, int cols, float* const* c) {
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < rows; ++i) {
      c[j][i] = kDot(k, static_cast<const char*>(a) + i * a_stride, b[j]);
    }
  }
}

constexpr DotKernels kF32{nullptr, F32RowBytes, Tile<DotFloat<float, Identity>>, kMaxTileRows};
constexpr DotKernels kF16{nullptr, F32RowBytes, Tile<DotFloat<uint16_t, HalfToFloat>>,
                          kMaxTileRows};
constexpr DotKernels kBF16{nullptr, F32RowBytes, Tile<DotFloat<uint16_t, BF16ToFloat>>,
                           kMaxTileRows};
constexpr DotKernels kQ8_0{FromF32Q8_0, Q8_0RowBytes, Tile<DotQ8_0>, 1};
constexpr DotKernels kQ4_0{FromF32Q8_0, Q8_0RowBytes, Tile<DotQ4_0>, 1};
constexpr DotKernels kQ4_K{FromF32Q8_K, Q8_KRowBytes, Tile<DotQ4_K>, 1};
constexpr DotKernels kQ6_K{FromF32Q8_K, Q8_KRowBytes, Tile<DotQ6_K>, 1};
constexpr DotKernels kQ5_0{FromF32Q8_0, Q8_0RowBytes, Tile<DotBlock32<Q5_0Block>>, 1};
constexpr DotKernels kQ5_1{FromF32Q8_0, Q8_0RowBytes, Tile<DotBlock32<Q5_1Block>>, 1};
constexpr DotKernels kIQ4_NL{FromF32Q8_0, Q8_0RowBytes, Tile<DotBlock32<IQ4_NLBlock>>, 1};
constexpr DotKernels kMXFP4{FromF32Q8_0, Q8_0RowBytes, Tile<DotBlock32<MXFP4Block>>, 1};
constexpr DotKernels kQ5_K{FromF32Q8_K, Q8_KRowBytes, Tile<DotSuperBlock<Q5_KBlock>>, 1};
constexpr DotKernels kQ3_K{FromF32Q8_K, Q8_KRowBytes, Tile<DotSuperBlock<Q3_KBlock>>, 1};
constexpr DotKernels kQ2_K{FromF32Q8_K, Q8_KRowBytes, Tile<DotSuperBlock<Q2_KBlock>>, 1};
constexpr DotKernels kIQ4_XS{FromF32Q8_K, Q8_KRowBytes, Tile<DotSuperBlock<IQ4_XSBlock>>, 1};

}  // namespace

const DotKernels& GetDotKernels(DType type) {
  switch (type) {
    case DType::kF16:
      return kF16;
    case DType::kBF16:
      return kBF16;
    case DType::kQ8_0:
      return kQ8_0;
    case DType::kQ4_0:
      return kQ4_0;
    case DType::kQ4_K:
      return kQ4_K;
    case DType::kQ6_K:
      return kQ6_K;
    case DType::kQ5_0:
      return kQ5_0;
    case DType::kQ5_1:
      return kQ5_1;
    case DType::kIQ4_NL:
      return kIQ4_NL;
    case DType::kMXFP4:
      return kMXFP4;
    case DType::kQ5_K:
      return kQ5_K;
    case DType::kQ3_K:
      return kQ3_K;
    case DType::kQ2_K:
      return kQ2_K;
    case DType::kIQ4_XS:
      return kIQ4_XS;
    case DType::kF32:
    case DType::kI32:
      break;  // I32 weights are rejected by the graph builder.
  }
  return kF32;
}

}  // namespace scalar

namespace {
std::atomic<bool> force_scalar{false};
}  // namespace

void ForceScalarDotKernelsForTesting(bool on) { force_scalar.store(on); }
bool ScalarDotKernelsForced() { return force_scalar.load(std::memory_order_relaxed); }

const char* DotKernelsIsa() {
#if defined(TG_CPU_AVX512)
  return "avx512";
#elif defined(TG_CPU_AVX2)
  return "avx2";
#else
  return "scalar";
#endif
}

const DotKernels& GetDotKernels(DType type) {
#if defined(TG_CPU_SIMD)
  if (!ScalarDotKernelsForced()) {
    switch (type) {
      case DType::kF16:
        return simd::kDotF16;
      case DType::kBF16:
        return simd::kDotBF16;
      case DType::kQ8_0:
        return simd::kDotQ8_0;
      case DType::kQ4_0:
        return simd::kDotQ4_0;
      case DType::kQ4_K:
        return simd::kDotQ4_K;
      case DType::kQ6_K:
        return simd::kDotQ6_K;
      case DType::kQ5_0:
        return simd::kDotQ5_0;
      case DType::kQ5_1:
        return simd::kDotQ5_1;
      case DType::kIQ4_NL:
        return simd::kDotIQ4_NL;
      case DType::kMXFP4:
        return simd::kDotMXFP4;
      case DType::kQ5_K:
        return simd::kDotQ5_K;
      case DType::kQ3_K:
        return simd::kDotQ3_K;
      case DType::kQ2_K:
        return simd::kDotQ2_K;
      case DType::kIQ4_XS:
        return simd::kDotIQ4_XS;
      case DType::kF32:
      case DType::kI32:
        return simd::kDotF32;
    }
  }
#endif
  return scalar::GetDotKernels(type);
}

}  // namespace tg::cpu
