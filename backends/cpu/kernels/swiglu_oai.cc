// SWIGLU_OAI: gpt-oss's clamped SwiGLU on F32 rows (docs/ops.md). Scalar: its rows are the
// experts' hidden width times the chosen experts, small next to the MUL_MAT_IDs around it.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_walk.h"
#include "core/op.h"

namespace tg::cpu {
namespace {

// Element i of a row whose elements are `stride` bytes apart (the sources may be views).
float Element(const float* row, size_t stride, int64_t i) {
  return *reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(row) + i * stride);
}

}  // namespace

void ComputeSwigluOai(const ComputeParams& p, Tensor* dst) {
  const Tensor& g = *dst->src[0];
  const Tensor& u = *dst->src[1];
  const float alpha = dst->ParamF32(kSwigluOaiAlpha);
  const float limit = dst->ParamF32(kSwigluOaiLimit);
  const int64_t n0 = g.ne[0];
  ForEachThreadRow(p, g.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    float* d = RowPtr<float>(*dst, i1, i2, i3);
    const float* gr = RowPtr<const float>(g, i1, i2, i3);
    const float* ur = RowPtr<const float>(u, i1, i2, i3);
    for (int64_t i = 0; i < n0; ++i) {
      const float x = std::min(Element(gr, g.nb[0], i), limit);
      const float y = std::clamp(Element(ur, u.nb[0], i), -limit, limit);
      d[i] = x / (1.0f + std::exp(-alpha * x)) * (y + 1.0f);
    }
  });
}

}  // namespace tg::cpu
