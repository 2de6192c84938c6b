// Sampler: picks the next token from logits — greedy (temperature <= 0), or temperature
// with top-k and top-p (nucleus) filtering from a seeded generator, so runs reproduce.
// Not thread-safe (holds the generator).
#ifndef TENSORGRID_MODELS_SAMPLER_H_
#define TENSORGRID_MODELS_SAMPLER_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace tg {

struct SamplerOptions {
  float temperature = 0.8f;  // <= 0: greedy.
  int32_t top_k = 40;        // <= 0: no limit.
  float top_p = 0.95f;       // >= 1: no limit.
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {}
  int32_t Sample(absl::Span<const float> logits);

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// The k largest (logit, id) pairs, largest first (ties: smaller id first).
std::vector<std::pair<float, int32_t>> TopK(absl::Span<const float> logits, int32_t k);

}  // namespace tg

#endif  // TENSORGRID_MODELS_SAMPLER_H_
