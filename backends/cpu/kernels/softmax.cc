// SOFT_MAX: dst = softmax(a * scale + mask) per row, with an optional broadcast F32/F16 mask
// and optional per-head sinks (a logit in the denominator only).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_convert.h"
#include "backends/cpu/kernels/row_walk.h"
#include "backends/cpu/kernels/simd_math.h"
#include "core/fp16.h"

namespace tg::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

#if defined(TG_SIMD)
using simd::kLanes;
using simd::Load;
using simd::Set1;
using simd::Store;
using simd::VecF;
#endif

// The mask row as the logits pass reads it: absent, dense f32 or dense f16.
struct NoMask {
  float At(int64_t) const { return 0.0f; }
#if defined(TG_SIMD)
  VecF Vec(int64_t) const { return Set1(0.0f); }
#endif
};

struct F32Mask {
  const float* p;
  float At(int64_t i) const { return p[i]; }
#if defined(TG_SIMD)
  VecF Vec(int64_t i) const { return Load(p + i); }
#endif
};

#if defined(TG_SIMD_AVX512) || (defined(TG_SIMD_AVX2) && defined(__F16C__))
#define TG_SOFTMAX_F16_MASK 1
struct F16Mask {
  const uint16_t* p;
  float At(int64_t i) const { return HalfToFloat(p[i]); }
#if defined(TG_SIMD_AVX512)
  VecF Vec(int64_t i) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
  }
#else
  VecF Vec(int64_t i) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
  }
#endif
};
#endif

// d = x * scale + mask; returns max(d). d may equal x.
template <class Mask>
float Logits(float* d, const float* x, const Mask& mask, float scale, int64_t n) {
  int64_t i = 0;
  float mx = kNegInf;
#if defined(TG_SIMD)
  const VecF vs = Set1(scale);
  VecF vmx = Set1(kNegInf);
  for (; i + kLanes <= n; i += kLanes) {
    const VecF v = simd::Fmadd(Load(x + i), vs, mask.Vec(i));
    Store(d + i, v);
    vmx = simd::Max(vmx, v);
  }
  mx = simd::ReduceMax(vmx);
#endif
  for (; i < n; ++i) {
    d[i] = x[i] * scale + mask.At(i);
    mx = std::max(mx, d[i]);
  }
  return mx;
}

// Logits of one row with its mask row (i1, i2 % m2, i3 % m3), read in place when dense F32
// or F16, else converted into buf first.
float MaskedLogits(float* d, const float* x, const Tensor* mask, int64_t i1, int64_t i2, int64_t i3,
                   float scale, int64_t n, float* buf) {
  if (mask == nullptr) return Logits(d, x, NoMask{}, scale, n);
  const uint8_t* row = RowPtr<const uint8_t>(*mask, i1, i2 % mask->ne[2], i3 % mask->ne[3]);
  if (mask->type == DType::kF32 && mask->nb[0] == sizeof(float)) {
    return Logits(d, x, F32Mask{reinterpret_cast<const float*>(row)}, scale, n);
  }
#if defined(TG_SOFTMAX_F16_MASK)
  if (mask->type == DType::kF16 && mask->nb[0] == sizeof(uint16_t)) {
    return Logits(d, x, F16Mask{reinterpret_cast<const uint16_t*>(row)}, scale, n);
  }
#endif
  ConvertRow(mask->type, row, mask->nb[0], DType::kF32, buf, sizeof(float), n);
  return Logits(d, x, F32Mask{buf}, scale, n);
}

}  // namespace

// Rows split over threads. The dst row doubles as the work row (logits, then exps).
void ComputeSoftMax(const ComputeParams& p, Tensor* dst) {
  const Tensor& a = *dst->src[0];
  const Tensor* mask = dst->src[1];
  const Tensor* sinks = dst->src[2];
  const float scale = dst->ParamF32(0);
  const int64_t n = a.ne[0];
  thread_local std::vector<float> mask_buf;
  if (mask != nullptr) mask_buf.resize(n);

  ForEachThreadRow(p, a.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    float* d = RowPtr<float>(*dst, i1, i2, i3);
    const float* x = RowPtr<const float>(a, i1, i2, i3);
    if (a.nb[0] != sizeof(float)) {  // strided source: gather into dst first.
      ConvertRow(DType::kF32, x, a.nb[0], DType::kF32, d, sizeof(float), n);
      x = d;
    }
    float mx = MaskedLogits(d, x, mask, i1, i2, i3, scale, n, mask_buf.data());
    if (mx == kNegInf) {  // fully masked row: zeros, not NaN (a sink takes all the weight).
      std::memset(d, 0, n * sizeof(float));
      return;
    }
    const float sink = sinks != nullptr ? static_cast<const float*>(sinks->data)[i2] : kNegInf;
    mx = std::max(mx, sink);
    const float sum =
        simd::ExpShiftedRowSum(d, mx, n) + (sinks != nullptr ? std::exp(sink - mx) : 0.0f);
    simd::ScaleRow(d, 1.0f / sum, n);
  });
}

}  // namespace tg::cpu
