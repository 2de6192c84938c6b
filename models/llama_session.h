// LlamaSession: one conversation with a model — its KV cache, a stream and a compute
// allocator on the model's device, or, for a model split by layers over several devices,
// a stream per device and the scheduler (core/scheduler.h) that runs each graph across them.
// Decode() appends tokens (prompt batches or single tokens) and returns the logits of the
// last token (or of every token). With several devices a prompt batch is pipelined: cut
// into micro-batches that are in flight together, so that device d computes micro-batch m+1
// while device d+1 computes micro-batch m. Not thread-safe; several sessions may share one
// model.
#ifndef TENSORGRID_MODELS_LLAMA_SESSION_H_
#define TENSORGRID_MODELS_LLAMA_SESSION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/graph_allocator.h"
#include "core/scheduler.h"
#include "models/kv_cache.h"
#include "models/llama_graph.h"
#include "models/llama_model.h"

namespace tg {

struct SessionOptions {
  int64_t n_ctx = 2048;   // positions the KV cache holds.
  int64_t n_batch = 512;  // tokens per graph when a prompt is longer.
  DType kv_type = DType::kF16;
  // Micro-batches of a prompt batch in flight at once when the model spans several devices
  // (0: kDefaultPipelineCopies; 1: no pipelining). Each holds its own compute memory.
  int n_copies = 0;
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
};

// llama.cpp's padding of n_kv: one decode graph serves 256 consecutive positions.
inline constexpr int64_t kDefaultKvPad = 256;

// Most greedy decode steps submitted together (SessionOptions::greedy_batch), and the
// decoding time a batch covers when its size is left to the session.
inline constexpr int kMaxGreedyBatch = 32;
inline constexpr int64_t kGreedyBatchUs = 3000;

// llama.cpp's GGML_SCHED_MAX_COPIES: enough micro-batches to keep a few devices busy.
inline constexpr int kDefaultPipelineCopies = 4;

struct DecodeTimings {
  double build_us = 0;     // graph construction, scheduling and allocation.
  double compute_us = 0;   // Stream::Compute, summed over devices (device time).
  double transfer_us = 0;  // copies between devices and all-reduce (device time).
  double overhead_us = 0;  // the scheduler's own work around its splits.
  int64_t graphs = 0;
  int64_t splits = 0;  // graph pieces run (scheduler splits; 1 per graph on one device).
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
  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return cache_->n_ctx(); }
  void Reset() { n_past_ = 0; }
  const DecodeTimings& timings() const { return timings_; }
  const KvCache& cache() const { return *cache_; }
  // Graphs built so far (a batch that reuses the previous graph builds none).
  int64_t graphs_built() const { return graphs_built_; }

 private:
  // Where a batch's results go; nullptr: not read.
  struct Readback {
    float* logits = nullptr;    // [n_vocab] or, with all_logits, [n_tokens * n_vocab].
    int32_t* argmax = nullptr;  // the last row's argmax, computed on the device.
  };

  static GraphOutput OutputOf(const Readback& out);

  explicit LlamaSession(const LlamaModel& model) : model_(model) {}
  absl::Status CreateScheduler();
  absl::Status CheckBatch(absl::Span<const int32_t> tokens) const;
  absl::Status RunBatches(absl::Span<const int32_t> tokens, bool all_logits, Readback out);
  absl::Status RunBatch(absl::Span<const int32_t> tokens, bool all_logits, Readback out);
  absl::Status RunOnOneDevice(absl::Span<const int32_t> tokens, bool all_logits, Readback out);
  // The graph for a batch of n tokens at n_past on one device: the last one when its shape
  // fits, else a new one, allocated.
  absl::StatusOr<LlamaGraph*> OneDeviceGraph(int64_t n, int64_t n_past, bool all_logits,
                                             GraphOutput output);
  bool LastGraphFits(int64_t n, int64_t n_past, bool all_logits, GraphOutput output) const;
  // One greedy step queued on the one device at n_past, in a graph that feeds its pick back:
  // its token from the host, or (token == nullptr) the pick the last run of that graph left
  // in its token input. The pick lands in `step` when its event has happened.
  struct GreedyStep {
    int32_t pick = -1;
    std::unique_ptr<Event> event;
  };
  bool QueuesGreedyAhead() const { return !greedy_steps_.empty(); }
  absl::Status QueueGreedyStep(const int32_t* token, int64_t n_past, GreedyStep& step);
  absl::Status WaitGreedyStep(GreedyStep& step);
  absl::Status RunScheduled(absl::Span<const int32_t> tokens, bool all_logits, Readback out);
  absl::Status RunPipelined(absl::Span<const int32_t> tokens, bool all_logits, Readback out);
  // The graph of one batch at n_past, with this session's logits choice and KV padding.
  absl::StatusOr<std::unique_ptr<LlamaGraph>> BuildBatchGraph(int64_t n_tokens, int64_t n_past,
                                                              bool all_logits, GraphOutput output);
  // Writes tokens, positions, the causal mask and the output row of a batch at n_past.
  // Tokens may be empty when the graph's token input is on the device already; with a
  // stream the writes are queued on it.
  absl::Status FillInputs(const LlamaGraph& g, absl::Span<const int32_t> tokens, int64_t n,
                          int64_t n_past, Stream* stream = nullptr);
  void AddSchedulerTimes(const SchedulerStats& before);

  const LlamaModel& model_;
  SessionOptions options_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Stream> stream_;  // one device.
  std::unique_ptr<GraphAllocator> allocator_;
  // One device: the last graph, allocated, kept for the next batch of the same shape (the
  // decode steps of one kv_pad block) instead of building and allocating an identical one.
  std::unique_ptr<LlamaGraph> last_graph_;
  bool last_all_logits_ = false;
  // The ring of greedy steps in flight (GenerateGreedy), twice the largest batch; without events
  // (several devices, or a device that has none) it is empty, and steps go one at a time.
  std::vector<GreedyStep> greedy_steps_;
  int64_t graphs_built_ = 0;
  std::vector<std::unique_ptr<Stream>> streams_;  // several devices: one per device,
  std::unique_ptr<Scheduler> scheduler_;          // used by the scheduler.
  int64_t n_past_ = 0;
  std::vector<float> logits_;
  std::vector<int32_t> scratch_i32_;
  std::vector<float> scratch_mask_;
  DecodeTimings timings_;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_LLAMA_SESSION_H_
