// LlamaSession: one conversation with a model — its KV cache and the positions filled so
// far. Decode() appends tokens (prompt batches or single tokens) and returns the logits of
// the last token (or of every token). The session cuts tokens into batches and describes
// each one (its graph, inputs and results) to an Executor (models/executor.h), which runs it
// on the model's one device or scheduled over the devices of a layer split; the session
// does not know which. Not thread-safe; several sessions may share one model.
#ifndef TENSORGRID_MODELS_LLAMA_SESSION_H_
#define TENSORGRID_MODELS_LLAMA_SESSION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/executor.h"
#include "models/kv_cache.h"
#include "models/llama_graph.h"
#include "models/llama_model.h"
#include "models/sequence_state.h"

namespace tg {

struct SessionOptions {
  int64_t n_ctx = 2048;   // positions the KV cache holds.
  int64_t n_batch = 512;  // tokens per graph when a prompt is longer.
  DType kv_type = DType::kF16;
  // Micro-batches of a prompt batch in flight at once when the model spans several devices
  // (0: kDefaultPipelineCopies; 1: no pipelining). Each holds its own compute memory.
  int n_copies = 0;
  // Fewest tokens of one such micro-batch (0: kMinMicroBatchTokens); a shorter batch runs
  // whole.
  int64_t min_micro_batch = 0;
  // The attended cache length is rounded up to a multiple of this (0: kDefaultKvPad), so
  // that consecutive decode graphs are identical: the session runs the one it has again and
  // a remote device reuses the one it has. The mask hides the extra cells, and attention
  // skips key blocks that are masked entirely.
  int64_t kv_pad = 0;
  // GenerateGreedy on a device with events (a remote device): decode steps submitted
  // together (Stream::BeginBatch: one message each way for this many steps), with up to two
  // such batches in flight. 1: each step on its own, the next one queued ahead. 0: as many
  // as take about kGreedyBatchUs to decode (measured as it goes), so that fast steps do
  // not pay a message each way while slow ones still arrive one by one.
  int greedy_batch = 0;
  // Every batch decoded one token per graph, as a generation step decodes it: a prompt, or a
  // failover's rebuild of the cache, then gives the bits of decoding it token by token on
  // any device, so a generation after a failover continues with exactly the tokens of an
  // uninterrupted run. Costs prompt throughput (docs/benchmarks.md, "--deterministic").
  bool deterministic = false;
};

// Sampling on the model's device (LlamaSession::DecodeSample, Generate): SAMPLE's parameters
// (docs/ops.md; temperature <= 0 picks the largest penalized logit) and the repetition
// penalty's window.
struct SamplingParams {
  SampleParams sample;
  // Tokens the repetition penalty looks back over, through the one being decoded
  // (llama.cpp's repeat_last_n; 64 is its default). 0, or a repeat_penalty of 1: none.
  int64_t penalty_last_n = 64;
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
  // Like Decode, but returns the id of the last token's largest logit (the first on ties),
  // picked by an ARGMAX on the model's device: greedy decoding without reading the logits,
  // so a remote device sends back 4 bytes instead of n_vocab floats.
  absl::StatusOr<int32_t> DecodeGreedy(absl::Span<const int32_t> tokens);
  // Greedy generation: decodes `token`, hands its pick to `on_token`, decodes the pick, and
  // so on, until `on_token` returns false or `max_tokens` picks were handed over (the last
  // pick is not decoded: n_past() grows by the number of picks). The same as calling
  // DecodeGreedy in a loop, but on a model on one device with events (a remote device) the
  // next steps are queued before the picks are read, each step's token copied from the
  // previous step's ARGMAX on the device, so the device never waits for the client's round
  // trip: SessionOptions::greedy_batch steps at a time, two such batches in flight. When
  // on_token stops early, the steps queued ahead are discarded (n_past() does not count
  // them). OUT_OF_RANGE when the context fills before the end.
  absl::Status GenerateGreedy(int32_t token, int64_t max_tokens,
                              absl::FunctionRef<bool(int32_t)> on_token);
  // Like DecodeGreedy, but the token is drawn on the device by SAMPLE with `params`, at the
  // last token's position (the generator's counter), so that the same seed gives the same
  // token on any device and in any batch. With `logits`, the last token's logits are read
  // back as well (valid until the next call).
  absl::StatusOr<int32_t> DecodeSample(absl::Span<const int32_t> tokens,
                                       const SamplingParams& params,
                                       absl::Span<const float>* logits = nullptr);
  // Sampled generation with GenerateGreedy's contract and queueing: each step draws its
  // token on the device as DecodeSample does, and on a device with events the next steps
  // are queued before the picks are read, each step's token copied from the previous
  // step's SAMPLE (its repetition-penalty window kept up to date on the device too). The
  // same as calling DecodeSample in a loop.
  absl::Status Generate(int32_t token, int64_t max_tokens, const SamplingParams& params,
                        absl::FunctionRef<bool(int32_t)> on_token);
  // The session's positions as a saved state (models/sequence_state.h): the tokens, every
  // layer's K and V rows, and `logits` (the last token's, or empty) kept beside them.
  absl::StatusOr<SequenceState> CaptureState(absl::Span<const float> logits = {}) const;
  // Replaces the session's positions with the first n of `state` (n <= its tokens): their
  // K and V rows are written, nothing is decoded. OUT_OF_RANGE when n exceeds the context.
  absl::Status RestoreState(const SequenceState& state, int64_t n);
  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return cache_->n_ctx(); }
  void Reset() {
    n_past_ = 0;
    history_.clear();
  }
  const DecodeTimings& timings() const { return executor_->timings(); }
  const KvCache& cache() const { return *cache_; }
  // Graphs built so far (a batch that reuses the previous graph builds none).
  int64_t graphs_built() const { return graphs_built_; }

 private:
  // Where a batch's results go; nullptr: not read.
  struct Readback {
    float* logits = nullptr;  // [n_vocab] or, with all_logits, [n_tokens * n_vocab].
    int32_t* pick = nullptr;  // the last row's pick (ARGMAX or SAMPLE), made on the device.
  };
  class TokenBatch;   // a batch of this session's tokens, as its executor sees it.
  class DeviceSteps;  // GenerateGreedy's and Generate's steps, as its executor sees them.

  explicit LlamaSession(const LlamaModel& model) : model_(model) {}
  absl::Status CheckBatch(absl::Span<const int32_t> tokens) const;
  absl::Status CheckTokens(absl::Span<const int32_t> tokens) const;
  absl::Status CheckRoom(int64_t n_past, int64_t n_tokens) const;
  // `sample` (nullptr: ARGMAX) is how a pick asked for in `out` is made.
  absl::Status RunBatches(absl::Span<const int32_t> tokens, bool all_logits, Readback out,
                          const PickOptions* sample = nullptr);
  // The graph of one batch at n_past, with this session's logits choice and KV padding.
  absl::StatusOr<std::unique_ptr<LlamaGraph>> BuildBatchGraph(int64_t n_tokens, int64_t n_past,
                                                              bool all_logits, GraphOutput output,
                                                              const PickOptions& pick);
  // The graph options of `params`; the penalty window's tensor is allocated on first use.
  absl::StatusOr<PickOptions> SamplingPick(const SamplingParams& params);
  // Writes the penalty window as it is after `tokens` (decoded after history_): the last
  // pick.penalty_window tokens, newest first, -1 where there are fewer.
  absl::Status FillPenaltyWindow(const PickOptions& pick, absl::Span<const int32_t> tokens,
                                 InputWriter write);
  // Writes tokens, positions, the causal mask and the output row of a batch at n_past.
  // Tokens may be empty when the graph's token input is on the device already.
  absl::Status FillInputs(const LlamaGraph& g, absl::Span<const int32_t> tokens, int64_t n,
                          int64_t n_past, InputWriter write);

  const LlamaModel& model_;
  SessionOptions options_;
  std::unique_ptr<KvCache> cache_;
  // The repetition penalty's window on the output device (PickOptions::recent), I32
  // [n_ctx + 1]; allocated by the first sampling call that needs it.
  Context recent_ctx_;
  std::unique_ptr<Buffer> recent_buffer_;
  Tensor* recent_ = nullptr;
  std::unique_ptr<Executor> executor_;  // declared after cache_ and recent_: destroyed first.
  int64_t graphs_built_ = 0;
  int64_t n_past_ = 0;
  std::vector<int32_t> history_;  // the tokens at positions [0, n_past_).
  std::vector<float> logits_;
  std::vector<int32_t> scratch_i32_;
  std::vector<float> scratch_mask_;
  std::vector<float> scratch_mask_swa_;  // sliding-window layers' mask (gpt-oss).
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_LLAMA_SESSION_H_
