// Reference dispatcher, plus the element-wise ops (ADD, MUL, DIV, SCALE, RMS_NORM, SILU, SWIGLU)
// and ARGMAX.
#include "reference/reference_ops.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "reference/reference_internal.h"

namespace tg::ref {
namespace internal {
namespace {

// Applies fn to every element of src0, row by row, writing dst of the same shape.
template <typename Fn>
absl::Status Unary(Tensor* dst, const char* op_name, Fn&& fn) {
  if (absl::Status s = CheckSources(*dst, op_name, 1); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  std::vector<double> row(dst->ne[0]);
  ForEachRow(*dst, [&](int64_t i1, int64_t i2, int64_t i3) {
    ReadRow(a, i1, i2, i3, row.data());
    for (double& v : row) v = fn(v);
    WriteRow(dst, i1, i2, i3, row.data());
  });
  return absl::OkStatus();
}

double SiluOf(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace

absl::Status AddOrMul(Tensor* dst) {
  const Op op = dst->op;
  const std::string name(OpName(op));
  const char* op_name = name.c_str();
  if (absl::Status s = CheckSources(*dst, op_name, 2); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  const Tensor& b = *dst->src[1];
  for (int d = 0; d < kMaxDims; ++d) {
    if (b.ne[d] <= 0 || dst->ne[d] % b.ne[d] != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: b.ne[%d] = %d does not divide %d", op_name, d, b.ne[d], dst->ne[d]));
    }
  }
  std::vector<double> ra(dst->ne[0]), rb(b.ne[0]);
  ForEachRow(*dst, [&](int64_t i1, int64_t i2, int64_t i3) {
    ReadRow(a, i1, i2, i3, ra.data());
    ReadRow(b, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3], rb.data());
    for (int64_t i0 = 0; i0 < dst->ne[0]; ++i0) {
      const double y = rb[i0 % b.ne[0]];
      ra[i0] = op == Op::kMul ? ra[i0] * y : op == Op::kDiv ? ra[i0] / y : ra[i0] + y;
    }
    WriteRow(dst, i1, i2, i3, ra.data());
  });
  return absl::OkStatus();
}

absl::Status Scale(Tensor* dst) {
  const double scale = dst->ParamF32(0);
  const double bias = dst->ParamF32(1);
  return Unary(dst, "SCALE", [&](double x) { return x * scale + bias; });
}

absl::Status Silu(Tensor* dst) { return Unary(dst, "SILU", SiluOf); }

absl::Status RmsNorm(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "RMS_NORM", 1); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  const double eps = dst->ParamF32(0);
  std::vector<double> row(dst->ne[0]);
  ForEachRow(*dst, [&](int64_t i1, int64_t i2, int64_t i3) {
    ReadRow(a, i1, i2, i3, row.data());
    double sum_sq = 0;
    for (double v : row) sum_sq += v * v;
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(row.size()) + eps);
    for (double& v : row) v *= inv_rms;
    WriteRow(dst, i1, i2, i3, row.data());
  });
  return absl::OkStatus();
}

absl::Status Swiglu(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "SWIGLU", 2); !s.ok()) return s;
  const Tensor& gate = *dst->src[0];
  const Tensor& up = *dst->src[1];
  std::vector<double> rg(dst->ne[0]), ru(dst->ne[0]);
  ForEachRow(*dst, [&](int64_t i1, int64_t i2, int64_t i3) {
    ReadRow(gate, i1, i2, i3, rg.data());
    ReadRow(up, i1, i2, i3, ru.data());
    for (size_t i = 0; i < rg.size(); ++i) rg[i] = SiluOf(rg[i]) * ru[i];
    WriteRow(dst, i1, i2, i3, rg.data());
  });
  return absl::OkStatus();
}

// gpt-oss's clamped SwiGLU in double, written from its definition (docs/ops.md): the clamps
// in f32 as the op defines them, the rest in double.
absl::Status SwigluOai(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "SWIGLU_OAI", 2); !s.ok()) return s;
  const double alpha = dst->ParamF32(kSwigluOaiAlpha);
  const double limit = dst->ParamF32(kSwigluOaiLimit);
  std::vector<double> rg(dst->ne[0]), ru(dst->ne[0]);
  ForEachRow(*dst, [&](int64_t i1, int64_t i2, int64_t i3) {
    ReadRow(*dst->src[0], i1, i2, i3, rg.data());
    ReadRow(*dst->src[1], i1, i2, i3, ru.data());
    for (size_t i = 0; i < rg.size(); ++i) {
      const double x = rg[i] < limit ? rg[i] : limit;
      const double y = ru[i] < -limit ? -limit : ru[i] > limit ? limit : ru[i];
      rg[i] = x / (1.0 + std::exp(-alpha * x)) * (y + 1.0);
    }
    WriteRow(dst, i1, i2, i3, rg.data());
  });
  return absl::OkStatus();
}

// The first index of the row's largest value, skipping NaN; 0 when the row has only NaN.
absl::Status Argmax(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "ARGMAX", 1); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  std::vector<double> row(a.ne[0]);
  ForEachRow(*dst, [&](int64_t i1, int64_t i2, int64_t i3) {
    ReadRow(a, i1, i2, i3, row.data());
    int64_t best = -1;
    for (int64_t i = 0; i < a.ne[0]; ++i) {
      if (std::isnan(row[i])) continue;
      if (best < 0 || row[i] > row[best]) best = i;
    }
    const double index = static_cast<double>(best < 0 ? 0 : best);
    WriteRow(dst, i1, i2, i3, &index);
  });
  return absl::OkStatus();
}

}  // namespace internal

absl::Status Compute(Tensor* dst) {
  using namespace internal;  // NOLINT(build/namespaces): the per-op functions.
  switch (dst->op) {
    case Op::kNone:
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose:
      return absl::OkStatus();  // aliases: the data is already where it belongs.
    case Op::kGetRows:
      return GetRows(dst);
    case Op::kSetRows:
      return SetRows(dst);
    case Op::kMulMat:
      return MulMat(dst);
    case Op::kMulMatId:
      return MulMatId(dst);
    case Op::kAdd:
    case Op::kMul:
    case Op::kDiv:
      return AddOrMul(dst);
    case Op::kArgsort:
      return Argsort(dst);
    case Op::kTopK:
      return TopK(dst);
    case Op::kSumRows:
      return SumRows(dst);
    case Op::kScale:
      return Scale(dst);
    case Op::kRmsNorm:
      return RmsNorm(dst);
    case Op::kRope:
      return Rope(dst);
    case Op::kSoftMax:
      return SoftMax(dst);
    case Op::kSilu:
      return Silu(dst);
    case Op::kSwiglu:
      return Swiglu(dst);
    case Op::kSwigluOai:
      return SwigluOai(dst);
    case Op::kCpy:
    case Op::kCont:
      return Copy(dst);
    case Op::kFlashAttn:
      return FlashAttn(dst);
    case Op::kArgmax:
      return Argmax(dst);
    case Op::kSample:
      return Sample(dst);
    case Op::kCount:
      break;
  }
  return absl::UnimplementedError(
      absl::StrFormat("reference: unknown op %d", static_cast<int>(dst->op)));
}

}  // namespace tg::ref
