#include "models/sampler.h"

#include <algorithm>
#include <cmath>

namespace tg {
namespace {

bool Better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

std::vector<std::pair<float, int32_t>> TopK(absl::Span<const float> logits, int32_t k) {
  std::vector<std::pair<float, int32_t>> all(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) all[i] = {logits[i], static_cast<int32_t>(i)};
  const size_t n = std::min<size_t>(std::max(k, 0), all.size());
  std::partial_sort(all.begin(), all.begin() + n, all.end(), Better);
  all.resize(n);
  return all;
}

int32_t Sampler::Sample(absl::Span<const float> logits) {
  if (logits.empty()) return -1;
  if (options_.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const int32_t k = options_.top_k > 0 ? options_.top_k : static_cast<int32_t>(logits.size());
  candidates_ = TopK(logits, k);
  // Softmax over the candidates at this temperature (largest first, so subtract it).
  const float max_logit = candidates_[0].first;
  double sum = 0;
  for (auto& [value, id] : candidates_) {
    value = static_cast<float>(std::exp((value - max_logit) / options_.temperature));
    sum += value;
  }
  // Nucleus: the smallest prefix whose probability reaches top_p.
  size_t keep = candidates_.size();
  if (options_.top_p < 1.0f) {
    double cumulative = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += candidates_[i].first / sum;
      if (cumulative >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_sum = 0;
  for (size_t i = 0; i < keep; ++i) kept_sum += candidates_[i].first;
  std::uniform_real_distribution<double> dist(0.0, kept_sum);
  double r = dist(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= candidates_[i].first;
    if (r <= 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace tg
