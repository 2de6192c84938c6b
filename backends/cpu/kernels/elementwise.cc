// Element-wise F32 kernels: ADD, MUL and DIV (with broadcast), SCALE, SILU and SWIGLU.
#include <cstdint>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_walk.h"
#include "backends/cpu/kernels/simd_math.h"

namespace tg::cpu {
namespace {

#if defined(TG_SIMD)
using simd::Add;
using simd::Div;
using simd::Fmadd;
using simd::kLanes;
using simd::Load;
using simd::Mul;
using simd::Set1;
using simd::Silu;
using simd::Store;
using simd::VecF;
#endif
using simd::SiluScalar;

constexpr size_t kF32Size = sizeof(float);

// Element i of a row whose elements are `stride` bytes apart.
float At(const float* row, size_t stride, int64_t i) {
  return *reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(row) + i * stride);
}

struct AddOp {
  static float Apply(float a, float b) { return a + b; }
#if defined(TG_SIMD)
  static VecF Apply(VecF a, VecF b) { return Add(a, b); }
#endif
};

struct MulOp {
  static float Apply(float a, float b) { return a * b; }
#if defined(TG_SIMD)
  static VecF Apply(VecF a, VecF b) { return Mul(a, b); }
#endif
};

struct DivOp {
  static float Apply(float a, float b) { return a / b; }
#if defined(TG_SIMD)
  static VecF Apply(VecF a, VecF b) { return Div(a, b); }
#endif
};

// d = a op b over n floats; d may alias a or b.
template <class Op>
void VecBinary(float* d, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
#if defined(TG_SIMD)
  for (; i + kLanes <= n; i += kLanes) Store(d + i, Op::Apply(Load(a + i), Load(b + i)));
#endif
  for (; i < n; ++i) d[i] = Op::Apply(a[i], b[i]);
}

template <class Op>
void VecBinaryScalar(float* d, const float* a, float b, int64_t n) {
  int64_t i = 0;
#if defined(TG_SIMD)
  const VecF vb = Set1(b);
  for (; i + kLanes <= n; i += kLanes) Store(d + i, Op::Apply(Load(a + i), vb));
#endif
  for (; i < n; ++i) d[i] = Op::Apply(a[i], b);
}

// One output row of a broadcast binary op: b's row (length b0) repeats along the a row.
template <class Op>
void BinaryRow(float* d, const float* a, size_t sa, const float* b, size_t sb, int64_t n0,
               int64_t b0) {
  if (sa == kF32Size && sb == kF32Size) {
    if (b0 == n0) {
      VecBinary<Op>(d, a, b, n0);
    } else if (b0 == 1) {
      VecBinaryScalar<Op>(d, a, b[0], n0);
    } else {
      for (int64_t c = 0; c < n0; c += b0) VecBinary<Op>(d + c, a + c, b, b0);
    }
    return;
  }
  for (int64_t i = 0; i < n0; ++i) d[i] = Op::Apply(At(a, sa, i), At(b, sb, i % b0));
}

// dst[i] = a[i] op b[i0 % b0, i1 % b1, i2 % b2, i3 % b3]; rows split over threads.
template <class Op>
void ComputeBinary(const ComputeParams& p, Tensor* dst) {
  const Tensor& a = *dst->src[0];
  const Tensor& b = *dst->src[1];
  ForEachThreadRow(p, a.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    BinaryRow<Op>(RowPtr<float>(*dst, i1, i2, i3), RowPtr<const float>(a, i1, i2, i3), a.nb[0],
                  RowPtr<const float>(b, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]), b.nb[0],
                  a.ne[0], b.ne[0]);
  });
}

// Runs row_fn(d, x, n) over this thread's rows of a unary op; x is a's row, or the dst row
// holding a gathered copy when a's elements are strided (row_fn must allow d == x).
template <class RowFn>
void ForEachUnaryRow(const ComputeParams& p, Tensor* dst, RowFn row_fn) {
  const Tensor& a = *dst->src[0];
  const int64_t n0 = a.ne[0];
  ForEachThreadRow(p, a.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    float* d = RowPtr<float>(*dst, i1, i2, i3);
    const float* x = RowPtr<const float>(a, i1, i2, i3);
    if (a.nb[0] != kF32Size) {
      for (int64_t i = 0; i < n0; ++i) d[i] = At(x, a.nb[0], i);
      x = d;
    }
    row_fn(d, x, n0);
  });
}

void ScaleRow(float* d, const float* x, int64_t n, float scale, float bias) {
  int64_t i = 0;
#if defined(TG_SIMD)
  const VecF vs = Set1(scale), vb = Set1(bias);
  for (; i + kLanes <= n; i += kLanes) Store(d + i, Fmadd(Load(x + i), vs, vb));
#endif
  for (; i < n; ++i) d[i] = x[i] * scale + bias;
}

void SiluRow(float* d, const float* x, int64_t n) {
  int64_t i = 0;
#if defined(TG_SIMD)
  for (; i + kLanes <= n; i += kLanes) Store(d + i, Silu(Load(x + i)));
#endif
  for (; i < n; ++i) d[i] = SiluScalar(x[i]);
}

void SwigluRow(float* d, const float* g, const float* u, int64_t n) {
  int64_t i = 0;
#if defined(TG_SIMD)
  for (; i + kLanes <= n; i += kLanes) Store(d + i, Mul(Silu(Load(g + i)), Load(u + i)));
#endif
  for (; i < n; ++i) d[i] = SiluScalar(g[i]) * u[i];
}

}  // namespace

void ComputeAdd(const ComputeParams& p, Tensor* dst) { ComputeBinary<AddOp>(p, dst); }

void ComputeMul(const ComputeParams& p, Tensor* dst) { ComputeBinary<MulOp>(p, dst); }

void ComputeDiv(const ComputeParams& p, Tensor* dst) { ComputeBinary<DivOp>(p, dst); }

void ComputeScale(const ComputeParams& p, Tensor* dst) {
  const float scale = dst->ParamF32(0);
  const float bias = dst->ParamF32(1);
  ForEachUnaryRow(p, dst, [scale, bias](float* d, const float* x, int64_t n) {
    ScaleRow(d, x, n, scale, bias);
  });
}

void ComputeSilu(const ComputeParams& p, Tensor* dst) { ForEachUnaryRow(p, dst, SiluRow); }

// dst = silu(gate) * up; both sources may be strided views (e.g. halves of a fused matmul).
void ComputeSwiglu(const ComputeParams& p, Tensor* dst) {
  const Tensor& g = *dst->src[0];
  const Tensor& u = *dst->src[1];
  const int64_t n0 = g.ne[0];
  ForEachThreadRow(p, g.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    float* d = RowPtr<float>(*dst, i1, i2, i3);
    const float* gr = RowPtr<const float>(g, i1, i2, i3);
    const float* ur = RowPtr<const float>(u, i1, i2, i3);
    if (g.nb[0] == kF32Size && u.nb[0] == kF32Size) {
      SwigluRow(d, gr, ur, n0);
    } else {
      for (int64_t i = 0; i < n0; ++i) d[i] = SiluScalar(At(gr, g.nb[0], i)) * At(ur, u.nb[0], i);
    }
  });
}

}  // namespace tg::cpu
