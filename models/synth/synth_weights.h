// Deterministic pseudo-random weights for synthetic models: a seeded xoshiro256** generator
// with Box-Muller normals (fast, and identical on every machine for a given seed), and
// tensors of such values stored in any DType through the reference quantizers.
#ifndef TENSORGRID_MODELS_SYNTH_SYNTH_WEIGHTS_H_
#define TENSORGRID_MODELS_SYNTH_SYNTH_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/dtype.h"

namespace tg::synth {

// Standard normal variates from xoshiro256** (seeded through splitmix64).
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed);
  float Next();

 private:
  uint64_t NextU64();
  uint64_t s_[4];
  bool have_spare_ = false;
  float spare_ = 0.0f;
};

// A per-tensor seed, so that a tensor's values do not depend on the order of generation.
uint64_t TensorSeed(uint64_t seed, absl::string_view name);

// `rows` rows of `ne0` values drawn from N(mean, stddev^2), stored as `type` (ne0 must be a
// multiple of BlockSize(type)). Generated on `threads` threads (<= 0: every core) in chunks of
// kRowsPerChunk rows, each from its own stream seeded by (seed, chunk): the bytes depend on the
// seed only, never on the thread count.
inline constexpr int64_t kRowsPerChunk = 32;
std::vector<uint8_t> RandomTensor(DType type, int64_t ne0, int64_t rows, float mean, float stddev,
                                  uint64_t seed, int threads);

}  // namespace tg::synth

#endif  // TENSORGRID_MODELS_SYNTH_SYNTH_WEIGHTS_H_
