// Row conversion between DTypes for the copy-like CPU kernels (see row_convert.h).
#include "backends/cpu/kernels/row_convert.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/simd_math.h"
#include "core/fp16.h"
#include "core/quants.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace tg::cpu {
namespace {

// Elements converted per step through the stack buffer: a multiple of every block size
// (32 and 256), small enough for the stack (4 KiB).
constexpr int64_t kChunk = 1024;
// FloatToBF16's bit recipe: round to nearest even by adding 0x7fff plus the kept lsb; a NaN
// (magnitude above the inf pattern) keeps its top bits with the quiet bit set.
constexpr int32_t kBF16QuietBit = 64;
constexpr int32_t kBF16RoundBias = 0x7fff;
constexpr int32_t kF32AbsMask = 0x7fffffff;
constexpr int32_t kF32InfBits = 0x7f800000;

// A type's traits, looked up once per ConvertRow: Traits() is an out-of-line call, and
// short rows (attention heads, single elements) would otherwise pay for it many times.
struct TypeInfo {
  DType type;
  bool quantized;
  int64_t block_size;
  size_t block_bytes;

  explicit TypeInfo(DType t) : type(t) {
    const DTypeTraits& traits = Traits(t);
    quantized = traits.quantized;
    block_size = traits.block_size;
    block_bytes = traits.block_bytes;
  }
  size_t Bytes(int64_t elements, size_t stride) const {
    return quantized ? elements / block_size * block_bytes : elements * stride;
  }
};

void BF16RowToFloat(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = BF16ToFloat(x[i]);  // auto-vectorizes.
}

void FloatRowToBF16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  // Vector form of FloatToBF16 (not VCVTNEPS2BF16, which flushes denormals).
  const __m512i abs_mask = _mm512_set1_epi32(kF32AbsMask);
  const __m512i inf_bits = _mm512_set1_epi32(kF32InfBits);
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(kBF16RoundBias), lsb)), 16);
    const __m512i quiet =
        _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(kBF16QuietBit));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf_bits);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(r));
  }
#endif
  for (; i < n; ++i) y[i] = FloatToBF16(x[i]);
}

float SameFloat(float v) { return v; }
float I32ToFloat(int32_t v) { return static_cast<float>(v); }

// Reads n elements of T, stride bytes apart, widened by kToFloat.
template <typename T, float (*kToFloat)(T)>
void LoadStrided(const uint8_t* p, size_t stride, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * stride, sizeof(v));
    out[i] = kToFloat(v);
  }
}

// Writes n f32 values as T (narrowed by kFromFloat), stride bytes apart.
template <typename T, T (*kFromFloat)(float)>
void StoreStrided(const float* in, uint8_t* p, size_t stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = kFromFloat(in[i]);
    std::memcpy(p + i * stride, &v, sizeof(v));
  }
}

// Reads n (<= kChunk) elements of a non-F32 or strided source as f32.
void LoadF32(const TypeInfo& info, const void* src, size_t stride, float* out, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  const DType type = info.type;
  if (info.quantized) {
    DequantizeRow(type, src, out, n);
    return;
  }
  const bool dense = stride == info.block_bytes;
  switch (type) {
    case DType::kF32:
      return LoadStrided<float, SameFloat>(p, stride, out, n);
    case DType::kF16:
      if (dense) return HalfRowToFloat(static_cast<const uint16_t*>(src), out, n);
      return LoadStrided<uint16_t, HalfToFloat>(p, stride, out, n);
    case DType::kBF16:
      if (dense) return BF16RowToFloat(static_cast<const uint16_t*>(src), out, n);
      return LoadStrided<uint16_t, BF16ToFloat>(p, stride, out, n);
    case DType::kI32:
      return LoadStrided<int32_t, I32ToFloat>(p, stride, out, n);
    default:
      return;
  }
}

// Writes n (<= kChunk) f32 values to a non-F32 or strided destination.
void StoreF32(const TypeInfo& info, const float* in, void* dst, size_t stride, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  const DType type = info.type;
  const bool dense = stride == info.block_bytes;
  if (info.quantized || (dense && type == DType::kI32)) {
    QuantizeRow(type, in, dst, n);
    return;
  }
  switch (type) {
    case DType::kF32:
      return StoreStrided<float, SameFloat>(in, p, stride, n);
    case DType::kF16:
      if (dense) return FloatRowToHalf(in, static_cast<uint16_t*>(dst), n);
      return StoreStrided<uint16_t, FloatToHalf>(in, p, stride, n);
    case DType::kBF16:
      if (dense) return FloatRowToBF16(in, static_cast<uint16_t*>(dst), n);
      return StoreStrided<uint16_t, FloatToBF16>(in, p, stride, n);
    case DType::kI32:  // strided: one element at a time through the reference rounding.
      for (int64_t i = 0; i < n; ++i) QuantizeRow(type, &in[i], p + i * stride, 1);
      return;
    default:
      return;
  }
}

// Same type: bits are copied as they are. memmove throughout: a graph from the network may
// alias source and destination (SET_ROWS into its own source); the result is then
// unspecified, but never undefined behaviour.
void CopySameType(const TypeInfo& info, const void* src, size_t src_stride, void* dst,
                  size_t dst_stride, int64_t n) {
  const size_t es = info.block_bytes;
  if (info.quantized || (src_stride == es && dst_stride == es)) {
    std::memmove(dst, src, info.Bytes(n, es));
    return;
  }
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (es == sizeof(uint32_t)) {
    for (int64_t i = 0; i < n; ++i) std::memmove(d + i * dst_stride, s + i * src_stride, 4);
  } else {
    for (int64_t i = 0; i < n; ++i) std::memmove(d + i * dst_stride, s + i * src_stride, 2);
  }
}

}  // namespace

void HalfRowToFloat(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(h));
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

void FloatRowToHalf(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), h);
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
#endif
  for (; i < n; ++i) y[i] = FloatToHalf(x[i]);
}

void ConvertRow(DType src_type, const void* src, size_t src_stride, DType dst_type, void* dst,
                size_t dst_stride, int64_t n) {
  // The hot conversions skip the type lookups altogether.
  if (src_type == DType::kF16 && dst_type == DType::kF32 && src_stride == sizeof(uint16_t) &&
      dst_stride == sizeof(float)) {
    return HalfRowToFloat(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  }
  if (src_type == DType::kF32 && dst_type == DType::kF16 && src_stride == sizeof(float) &&
      dst_stride == sizeof(uint16_t)) {
    return FloatRowToHalf(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  }
  const TypeInfo si(src_type), di(dst_type);
  if (src_type == dst_type) {
    CopySameType(si, src, src_stride, dst, dst_stride, n);
    return;
  }
  const bool src_dense_f32 = src_type == DType::kF32 && src_stride == sizeof(float);
  const bool dst_dense_f32 = dst_type == DType::kF32 && dst_stride == sizeof(float);
  alignas(64) float buf[kChunk];
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t m = std::min(kChunk, n - off);
    const uint8_t* s = static_cast<const uint8_t*>(src) + si.Bytes(off, src_stride);
    uint8_t* d = static_cast<uint8_t*>(dst) + di.Bytes(off, dst_stride);
    if (dst_dense_f32) {  // straight into the destination, no staging.
      LoadF32(si, s, src_stride, reinterpret_cast<float*>(d), m);
      continue;
    }
    const float* f = reinterpret_cast<const float*>(s);
    if (!src_dense_f32) {
      LoadF32(si, s, src_stride, buf, m);
      f = buf;
    }
    StoreF32(di, f, d, dst_stride, m);
  }
}

}  // namespace tg::cpu
