// Reference attention ops: ROPE (normal/neox, freq factors, YaRN), SOFT_MAX and FLASH_ATTN.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/fp16.h"
#include "reference/reference_internal.h"
#include "reference/reference_ops.h"

namespace tg::ref::internal {
namespace {

constexpr int kRopeModeNormal = 0;
constexpr int kRopeModeNeox = 2;

// ROPE's op_params, decoded (docs/ops.md).
struct RopeParams {
  int n_dims, mode, n_ctx_orig;
  double freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
};

RopeParams DecodeRopeParams(const Tensor& dst) {
  return {dst.op_params[0], dst.op_params[1], dst.op_params[2], dst.ParamF32(3), dst.ParamF32(4),
          dst.ParamF32(5),  dst.ParamF32(6),  dst.ParamF32(7),  dst.ParamF32(8)};
}

// ggml_rope_yarn_corr_dim: the pair index whose wavelength makes n_rot turns in n_ctx_orig.
double YarnCorrDim(const RopeParams& p, double n_rot) {
  return p.n_dims * std::log(p.n_ctx_orig / (n_rot * 2 * std::numbers::pi)) /
         (2 * std::log(p.freq_base));
}

// The rotation angle and magnitude of pair i at position pos (ggml's rope_yarn).
void RopeAngle(const RopeParams& p, double pos, int i, double freq_factor, double* theta,
               double* mscale) {
  const double theta_extrap = pos * std::pow(p.freq_base, -2.0 * i / p.n_dims) / freq_factor;
  const double theta_interp = p.freq_scale * theta_extrap;
  *theta = theta_interp;
  *mscale = p.attn_factor;
  if (p.ext_factor == 0) return;
  const double low = std::max(0.0, std::floor(YarnCorrDim(p, p.beta_fast)));
  const double high = std::min(p.n_dims - 1.0, std::ceil(YarnCorrDim(p, p.beta_slow)));
  const double y = (i - low) / std::max(0.001, high - low);
  const double ramp_mix = (1 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
  *theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
  *mscale = p.attn_factor * (1 + 0.1 * std::log(1 / p.freq_scale));
}

// Rotates the first n_dims elements of one head's row in place.
void RopeRow(const RopeParams& p, double pos, const Tensor* ff, std::vector<double>* row) {
  const int half = p.n_dims / 2;
  for (int i = 0; i < half; ++i) {
    const double factor = ff != nullptr ? ReadElement(*ff, i, 0, 0, 0) : 1.0;
    double theta, mscale;
    RopeAngle(p, pos, i, factor, &theta, &mscale);
    const int i0 = p.mode == kRopeModeNeox ? i : 2 * i;
    const int i1 = p.mode == kRopeModeNeox ? i + half : 2 * i + 1;
    const double x0 = (*row)[i0], x1 = (*row)[i1];
    (*row)[i0] = (x0 * std::cos(theta) - x1 * std::sin(theta)) * mscale;
    (*row)[i1] = (x0 * std::sin(theta) + x1 * std::cos(theta)) * mscale;
  }
}

// One query row: out = softmax(scale * K q + mask) V, with K [n_kv][d] and V [n_kv][dv]
// row-major; mask_row may be null.
void AttendRow(const std::vector<double>& q_row, const std::vector<double>& k_mat,
               const std::vector<double>& v_mat, const double* mask_row, double scale,
               double* out) {
  const size_t d = q_row.size();
  const size_t n_kv = k_mat.size() / d;
  const size_t dv = v_mat.size() / n_kv;
  std::vector<double> s(n_kv);
  for (size_t j = 0; j < n_kv; ++j) {
    double dot = 0;
    for (size_t c = 0; c < d; ++c) dot += q_row[c] * k_mat[j * d + c];
    s[j] = scale * dot + (mask_row != nullptr ? mask_row[j] : 0.0);
  }
  SoftmaxInPlace(&s);  // a fully masked row gives all-zero weights, so zeros out.
  std::fill(out, out + dv, 0.0);
  for (size_t j = 0; j < n_kv; ++j) {
    if (s[j] == 0) continue;  // masked keys contribute nothing, even where V is inf/NaN.
    for (size_t c = 0; c < dv; ++c) out[c] += s[j] * v_mat[j * dv + c];
  }
}

}  // namespace

absl::Status Rope(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "ROPE", 2); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  const Tensor& pos = *dst->src[1];
  const Tensor* ff = dst->src[2];
  if (absl::Status s = CheckIndexType(pos, "ROPE"); !s.ok()) return s;
  const RopeParams p = DecodeRopeParams(*dst);
  if (p.mode != kRopeModeNormal && p.mode != kRopeModeNeox) {
    return absl::UnimplementedError(absl::StrFormat("ROPE: mode %d (only 0 and 2)", p.mode));
  }
  if (p.n_dims <= 0 || p.n_dims % 2 != 0 || p.n_dims > a.ne[0]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ROPE: n_dims %d for head_dim %d", p.n_dims, a.ne[0]));
  }
  std::vector<double> row(a.ne[0]);
  ForEachRow(*dst, [&](int64_t h, int64_t t, int64_t i3) {
    ReadRow(a, h, t, i3, row.data());
    RopeRow(p, ReadIndex(pos, t, 0, 0), ff, &row);
    WriteRow(dst, h, t, i3, row.data());
  });
  return absl::OkStatus();
}

absl::Status SoftMax(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "SOFT_MAX", 1); !s.ok()) return s;
  const Tensor& a = *dst->src[0];
  const Tensor* mask = dst->src[1];
  const Tensor* sinks = dst->src[2];
  const double scale = dst->ParamF32(0);
  if (dst->ParamF32(1) != 0) {
    return absl::UnimplementedError(
        absl::StrFormat("SOFT_MAX: max_bias %g (ALiBi) is not supported", dst->ParamF32(1)));
  }
  if (mask != nullptr && (mask->ne[0] < a.ne[0] || mask->ne[1] < a.ne[1])) {
    return absl::InvalidArgumentError(absl::StrFormat("SOFT_MAX: mask %s too small for %s",
                                                      DescribeTensor(*mask), DescribeTensor(a)));
  }
  std::vector<double> row(a.ne[0]);
  std::vector<double> mask_row(mask != nullptr ? mask->ne[0] : 0);
  ForEachRow(*dst, [&](int64_t r1, int64_t r2, int64_t r3) {
    ReadRow(a, r1, r2, r3, row.data());
    if (mask != nullptr) ReadRow(*mask, r1, r2 % mask->ne[2], r3 % mask->ne[3], mask_row.data());
    for (size_t j = 0; j < row.size(); ++j) {
      row[j] = row[j] * scale + (mask != nullptr ? mask_row[j] : 0.0);
    }
    const bool masked =
        std::all_of(row.begin(), row.end(), [](double v) { return std::isinf(v) && v < 0; });
    // The sink joins the softmax as one more logit and leaves the result; a fully masked
    // row stays zeros.
    if (sinks != nullptr) row.push_back(masked ? -INFINITY : ReadElement(*sinks, r2, 0, 0, 0));
    SoftmaxInPlace(&row);
    row.resize(a.ne[0]);
    WriteRow(dst, r1, r2, r3, row.data());
  });
  return absl::OkStatus();
}

absl::Status FlashAttn(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "FLASH_ATTN", 3); !s.ok()) return s;
  const Tensor& q = *dst->src[0];
  const Tensor& k = *dst->src[1];
  const Tensor& v = *dst->src[2];
  const Tensor* mask = dst->src[3];
  const double scale = dst->ParamF32(0);
  if (dst->ParamF32(1) != 0 || dst->ParamF32(2) != 0) {
    return absl::UnimplementedError(
        absl::StrFormat("FLASH_ATTN: max_bias %g / logit_softcap %g are not supported",
                        dst->ParamF32(1), dst->ParamF32(2)));
  }
  const int64_t d = q.ne[0], dv = v.ne[0], n_q = q.ne[1], n_kv = k.ne[1];
  const int64_t n_head = q.ne[2], n_head_kv = k.ne[2];
  if (n_head_kv <= 0 || n_head % n_head_kv != 0 || k.ne[0] != d || v.ne[1] != n_kv ||
      (mask != nullptr && (mask->ne[0] < n_kv || mask->ne[1] < n_q))) {
    return absl::InvalidArgumentError(absl::StrFormat("FLASH_ATTN: incompatible q %s, k %s, v %s",
                                                      DescribeTensor(q), DescribeTensor(k),
                                                      DescribeTensor(v)));
  }
  const int64_t group = n_head / n_head_kv;  // query heads sharing one KV head (GQA).
  std::vector<double> q_row(d), out(dv);
  std::vector<double> mask_row(mask != nullptr ? mask->ne[0] : 0);
  for (int64_t b = 0; b < q.ne[3]; ++b) {
    for (int64_t hk = 0; hk < n_head_kv; ++hk) {
      const std::vector<double> k_mat = ReadMatrix(k, hk, b);  // [n_kv][d]
      const std::vector<double> v_mat = ReadMatrix(v, hk, b);  // [n_kv][dv]
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t i = 0; i < n_q; ++i) {
          ReadRow(q, i, h, b, q_row.data());
          // docs/ops.md: with F16 keys the scores are F16 x F16 dot products.
          if (k.type == DType::kF16) {
            for (double& x : q_row) x = HalfToFloat(FloatToHalf(static_cast<float>(x)));
          }
          // The spec's mask is [n_kv, n_q, 1, 1]; a bigger one broadcasts like SOFT_MAX's.
          if (mask != nullptr) ReadRow(*mask, i, h % mask->ne[2], b % mask->ne[3], mask_row.data());
          AttendRow(q_row, k_mat, v_mat, mask != nullptr ? mask_row.data() : nullptr, scale,
                    out.data());
          WriteRow(dst, h, i, b, out.data());
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tg::ref::internal
