// BatchSession: many sequences of one model decoded together over one shared KV cache — the
// engine a server runs its users on (llama.cpp's unified KV cache; docs/architecture.md,
// "Many sequences"). Each Step() is one graph (or the executor's pipelined pieces of it) that
// holds any mix of sequences' tokens: the decode token of every running sequence and chunks
// of new prompts, each token with its sequence, position and cache cell, the attention mask
// built per sequence (models/kv_cells.h). The output rows are each item's last token; their
// picks are made on the device (ARGMAX, or SAMPLE with that sequence's parameters), so a
// remote device sends back 4 bytes a sequence.
// A step whose key (tokens, outputs, padded cells) equals the previous step's reuses its
// graph. Sequences end (their cells free at once) and share prefixes (a new sequence starts
// from another's first positions without decoding them again). Runs on every placement
// LlamaSession does: one device, a layer split, a tensor split, remote devices.
// Not thread-safe; one owner thread.
#ifndef TENSORGRID_MODELS_BATCH_SESSION_H_
#define TENSORGRID_MODELS_BATCH_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "models/executor.h"
#include "models/kv_cache.h"
#include "models/kv_cells.h"
#include "models/llama_model.h"
#include "models/llama_session.h"

namespace tg {

struct BatchSessionOptions {
  int64_t n_ctx = 4096;   // cells of the shared cache; sequences take what they use.
  int64_t n_batch = 512;  // most tokens in one step.
  DType kv_type = DType::kF16;
  // The attended cell count is rounded up to a multiple of this (0: kDefaultKvPad), so that
  // consecutive decode steps share a graph.
  int64_t kv_pad = 0;
  int n_copies = 0;  // several devices: pipelined pieces of a step (0: the default).
  int64_t min_micro_batch = 0;  // fewest tokens of such a piece (0: kMinMicroBatchTokens).
};

// One sequence's part of a step: its next tokens, at its next positions, and how its last
// token's pick is made on the device: ARGMAX (greedy; sampling nullptr) or SAMPLE with the
// sequence's parameters, drawn at the token's position (the same seed gives LlamaSession's
// DecodeSample draws), its repetition penalty over the sequence's own last tokens.
struct SequenceWork {
  int seq = -1;
  absl::Span<const int32_t> tokens;
  const SamplingParams* sampling = nullptr;
};

// What a step gives each item, for its last token.
struct SequenceResult {
  int32_t pick = -1;          // ARGMAX's (the first largest logit) or SAMPLE's, on the device.
  std::vector<float> logits;  // [n_vocab], when the step asked for logits.
};

class BatchSession {
 public:
  static absl::StatusOr<std::unique_ptr<BatchSession>> Create(const LlamaModel& model,
                                                              const BatchSessionOptions& options);

  // A new, empty sequence; RESOURCE_EXHAUSTED when KvCells::kMaxSequences are live.
  absl::StatusOr<int> NewSequence();
  // A new sequence that starts with the first n_pos positions of `src` (their cells shared,
  // nothing decoded again); INVALID_ARGUMENT for an unknown src or n_pos past its end.
  absl::StatusOr<int> ForkPrefix(int src, int64_t n_pos);
  // Ends `seq`: its cells are free for others at once. INVALID_ARGUMENT for an unknown id.
  absl::Status EndSequence(int seq);
  // `seq`'s state as bytes (models/sequence_state.h: its tokens and every layer's K and V
  // rows, logical: a session on any split restores it), with `logits` (its last token's,
  // or empty) kept beside them.
  absl::StatusOr<std::string> SaveSequence(int seq, absl::Span<const float> logits = {}) const;
  // A new sequence holding a saved state: its rows are written into free cells, nothing is
  // decoded; the saved logits go to `logits` when given. INVALID_ARGUMENT for another
  // model's, a truncated or a damaged state; OUT_OF_RANGE when too few cells are free.
  absl::StatusOr<int> RestoreSequence(absl::string_view state,
                                      std::vector<float>* logits = nullptr);

  // Decodes every item's tokens in one batch and returns, per item in order, its last
  // token's pick (and logits with `with_logits`). Errors leave every sequence as it was:
  // INVALID_ARGUMENT for an unknown sequence, one listed twice, no tokens, a token outside
  // the vocabulary, or more than n_batch tokens in all; OUT_OF_RANGE when the cache has too
  // few free cells (naming the sequence and the counts).
  absl::StatusOr<std::vector<SequenceResult>> Step(absl::Span<const SequenceWork> work,
                                                   bool with_logits = false);

  int64_t n_past(int seq) const { return seqs_[seq].n_past; }  // positions held (seq live).
  bool live(int seq) const {
    return seq >= 0 && seq < static_cast<int>(seqs_.size()) && seqs_[seq].live;
  }
  int64_t tokens_decoded() const { return tokens_decoded_; }  // every step's tokens, summed.
  int64_t graphs_built() const { return graphs_built_; }
  const KvCells& cells() const { return cells_; }
  const DecodeTimings& timings() const { return executor_->timings(); }

 private:
  struct Sequence {
    bool live = false;
    int64_t n_past = 0;
    std::vector<int32_t> tokens;  // at positions [0, n_past).
  };
  class StepBatch;  // one step as the executor sees it.

  BatchSession(const LlamaModel& model, const BatchSessionOptions& options)
      : model_(model), options_(options), cells_(options.n_ctx) {}
  absl::Status CheckSequence(int seq) const;
  absl::Status CheckWork(absl::Span<const SequenceWork> work) const;

  const LlamaModel& model_;
  BatchSessionOptions options_;
  KvCells cells_;
  std::vector<Sequence> seqs_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Executor> executor_;  // declared after cache_: destroyed first.
  int64_t tokens_decoded_ = 0;
  int64_t graphs_built_ = 0;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_BATCH_SESSION_H_
