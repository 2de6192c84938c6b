// LlamaSession: one conversation with a model — its KV cache, a stream and a compute
// allocator on the model's device. Decode() appends tokens (prompt batches or single
// tokens) and returns the logits of the last token (or of every token). Not thread-safe;
// several sessions may share one model.
#ifndef TENSORGRID_MODELS_LLAMA_SESSION_H_
#define TENSORGRID_MODELS_LLAMA_SESSION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/graph_allocator.h"
#include "models/kv_cache.h"
#include "models/llama_model.h"

namespace tg {

struct SessionOptions {
  int64_t n_ctx = 2048;           // positions the KV cache holds.
  int64_t n_batch = 512;          // tokens per graph when a prompt is longer.
  DType kv_type = DType::kF16;
};

struct DecodeTimings {
  double build_us = 0;    // graph construction and allocation.
  double compute_us = 0;  // Stream::Compute.
  int64_t graphs = 0;
};

class LlamaSession {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaSession>> Create(const LlamaModel& model,
                                                              const SessionOptions& options);

  // Runs `tokens` at positions n_past()..; returns logits [n_vocab] of the last token, or
  // [n_tokens * n_vocab] when all_logits. INVALID_ARGUMENT for a token id outside the
  // vocabulary, OUT_OF_RANGE when the context is full.
  absl::StatusOr<absl::Span<const float>> Decode(absl::Span<const int32_t> tokens,
                                                 bool all_logits = false);
  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return cache_->n_ctx(); }
  void Reset() { n_past_ = 0; }
  const DecodeTimings& timings() const { return timings_; }
  const KvCache& cache() const { return *cache_; }

 private:
  LlamaSession(const LlamaModel& model) : model_(model) {}
  absl::Status RunBatch(absl::Span<const int32_t> tokens, bool all_logits, float* out);

  const LlamaModel& model_;
  SessionOptions options_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<GraphAllocator> allocator_;
  int64_t n_past_ = 0;
  std::vector<float> logits_;
  std::vector<int32_t> scratch_i32_;
  std::vector<float> scratch_mask_;
  DecodeTimings timings_;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_LLAMA_SESSION_H_
