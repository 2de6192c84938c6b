// Reference SAMPLE, straight from docs/ops.md: the whole row sorted (stable, so equal
// logits keep ascending ids), every weight, sum and cut in f64, and its own Philox4x32-10
// written from the Random123 specification (not the CPU kernel's).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "reference/reference_internal.h"
#include "reference/reference_ops.h"

namespace tg::ref {
namespace internal {
namespace {

// 32x32 -> 64-bit product split into its high and low halves.
void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product & 0xffffffffu);
}

// The weight of a candidate whose logit is `d` below the best one's, at temperature t.
double Weight(double d, double t) { return std::exp(-d / t); }

struct Cuts {
  double temperature;
  int64_t top_k;
  double top_p;
  double min_p;
};

// The id drawn from `order` (candidate ids, best first) of the penalized logits `l`.
int32_t DrawFrom(const std::vector<int64_t>& order, const std::vector<double>& l, const Cuts& c,
                 double u) {
  std::vector<double> w;
  for (int64_t id : order) w.push_back(Weight(l[order[0]] - l[id], c.temperature));
  size_t keep = w.size();
  if (c.top_p < 1) {
    const double nucleus = c.top_p * std::accumulate(w.begin(), w.end(), 0.0);
    double prefix = 0;
    for (keep = 0; keep < w.size();) {
      prefix += w[keep++];
      if (prefix >= nucleus) break;
    }
  }
  if (c.min_p > 0) {
    size_t above = 1;
    while (above < keep && w[above] >= c.min_p) ++above;
    keep = above;
  }
  const double target = u * std::accumulate(w.begin(), w.begin() + keep, 0.0);
  double prefix = 0;
  for (size_t i = 0; i < keep; ++i) {
    prefix += w[i];
    if (prefix > target) return static_cast<int32_t>(order[i]);
  }
  return static_cast<int32_t>(order[keep - 1]);
}

// One row: penalties, then argmax (temperature <= 0) or the draw.
int32_t SampleRow(std::vector<double> l, const std::set<int32_t>& recent, double penalty,
                  const Cuts& c, double u) {
  const int64_t n = static_cast<int64_t>(l.size());
  for (int32_t t : recent) {
    if (t < 0 || t >= n) continue;
    // In f64 then rounded once to f32: the same value as the f32 division or product.
    l[t] = static_cast<float>(l[t] > 0 ? l[t] / penalty : l[t] * penalty);
  }
  if (c.temperature <= 0) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isnan(l[i]) && (best < 0 || l[i] > l[best])) best = i;
    }
    return static_cast<int32_t>(std::max<int64_t>(best, 0));
  }
  const double kMaxFloat = std::numeric_limits<float>::max();
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(l[i]) || l[i] == -std::numeric_limits<double>::infinity()) continue;
    l[i] = std::min(l[i], kMaxFloat);
    order.push_back(i);
  }
  if (order.empty()) return 0;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  if (c.top_k > 0 && c.top_k < static_cast<int64_t>(order.size())) order.resize(c.top_k);
  return DrawFrom(order, l, c, u);
}

}  // namespace

std::array<uint32_t, 4> Philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += 0x9E3779B9u;  // bump: golden ratio
      key[1] += 0xBB67AE85u;  // and sqrt(3) - 1, as 32-bit fractions.
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(0xD2511F53u, ctr[0], &hi0, &lo0);
    MulHiLo(0xCD9E8D57u, ctr[2], &hi1, &lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

double SampleUniform(uint64_t seed, int32_t position) {
  const std::array<uint32_t, 4> x =
      Philox4x32_10({static_cast<uint32_t>(position), 0, 0, 0},
                    {static_cast<uint32_t>(seed & 0xffffffffu), static_cast<uint32_t>(seed >> 32)});
  const double high = std::ldexp(static_cast<double>(x[0]), -32);
  const double low = std::ldexp(static_cast<double>(x[1] >> 11), -53);
  return high + low;  // exact: 53 significant bits at most.
}

absl::Status Sample(Tensor* dst) {
  if (absl::Status s = CheckSources(*dst, "SAMPLE", 2); !s.ok()) return s;
  if (absl::Status s = CheckIndexType(*dst->src[1], "SAMPLE"); !s.ok()) return s;
  const Tensor& logits = *dst->src[0];
  const Tensor* recent = dst->src[2];
  std::set<int32_t> window;
  if (recent != nullptr && dst->ParamF32(4) != 1.0f) {
    for (int64_t i = 0; i < recent->ne[0]; ++i) window.insert(ReadIndex(*recent, i, 0, 0));
  }
  const Cuts cuts{dst->ParamF32(0), dst->op_params[1], dst->ParamF32(2), dst->ParamF32(3)};
  const uint64_t seed = static_cast<uint64_t>(static_cast<uint32_t>(dst->op_params[6])) << 32 |
                        static_cast<uint32_t>(dst->op_params[5]);
  const auto* positions = static_cast<const int32_t*>(dst->src[1]->data);  // one per row.
  int64_t row = 0;
  ForEachRow(logits, [&](int64_t i1, int64_t i2, int64_t i3) {
    const int32_t position = positions[row++];
    const int32_t id = SampleRow(ReadRowVector(logits, i1, i2, i3), window, dst->ParamF32(4), cuts,
                                 SampleUniform(seed, position));
    const double value = id;
    WriteRow(dst, i1, i2, i3, &value);
  });
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace tg::ref
