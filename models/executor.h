// Executor: how a LlamaSession's graphs run. The session describes the work in its own
// terms — a Batch (how to build the graph of a piece of it, fill that graph's inputs and
// read its results) and PickSteps (how to queue one step of generation that picks its token
// on the device, greedy or sampled) — and the executor decides where and how it runs: on
// one device (models/single_device_executor.h: a graph reused by the next batch of the same
// shape, generation steps queued ahead with events), or
// scheduled over the devices of a layer split (models/scheduled_executor.h: a prompt batch
// pipelined in micro-batches). The session does not know which one it has.
// Not thread-safe: an executor is used by its session's thread.
#ifndef TENSORGRID_MODELS_EXECUTOR_H_
#define TENSORGRID_MODELS_EXECUTOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "models/llama_graph.h"
#include "models/llama_model.h"

namespace tg {

struct DecodeTimings {
  double build_us = 0;     // graph construction, scheduling and allocation.
  double compute_us = 0;   // Stream::Compute, summed over devices (device time).
  double transfer_us = 0;  // copies between devices and all-reduce (device time).
  double overhead_us = 0;  // the scheduler's own work around its splits.
  int64_t graphs = 0;
  int64_t splits = 0;  // graph pieces run (scheduler splits; 1 per graph on one device).
  // Graphs run with the host CPU beside a device that lacked kernels for some of their
  // nodes (models/fallback_executor.h), and the device's refusal that started it.
  int64_t fallback_graphs = 0;
  std::string fallback_reason;
};

// Most generation steps submitted together (SessionOptions::greedy_batch), and the decoding
// time a batch covers when its size is left to the executor: picks reach the host in bursts
// of at most this long (20 ms: 50 a second, smooth to a reader of streamed text), and a
// small model's steps go many to a message (15-19 of the 15M model's on a 2-vCPU host),
// which on shared cores leaves the server's compute threads fewer interruptions by the
// client and the messages (docs/rpc.md).
inline constexpr int kMaxGreedyBatch = 32;
inline constexpr int64_t kGreedyBatchUs = 20000;

// llama.cpp's GGML_SCHED_MAX_COPIES: enough micro-batches to keep a few devices busy.
inline constexpr int kDefaultPipelineCopies = 4;
// The fewest tokens of a pipelined micro-batch: each costs a graph built, placed and sent to
// every device of the split, which smaller pieces do not earn back. Measured over two
// rpc-servers on loopback (15M shape Q8_0, -t 1 each, 2 vCPUs), pp128: 2585 t/s whole, 2249
// in 2 pieces, 1697 in 4; pp512: 2284 whole, 3076 in 4 pieces of 128; a decode step of 8
// sequences in 4 pieces ran at 0.38x of whole.
inline constexpr int64_t kMinMicroBatchTokens = 128;

// Rows [offset, offset + size) of a batch: what one graph computes.
struct BatchPiece {
  int64_t offset = 0;
  int64_t size = 0;

  friend bool operator==(const BatchPiece&, const BatchPiece&) = default;
};

// What makes two graphs interchangeable: a graph built for one piece runs another piece of
// the same key once that piece's inputs are written (the decode steps of one kv_pad block).
struct GraphKey {
  int64_t n_tokens = 0;
  int64_t n_kv = 0;
  bool all_logits = false;
  int64_t n_outputs = 0;  // output rows, where a batch picks them (models/batch_session.h).
  GraphOutput output = GraphOutput::kLogits;
  PickOptions pick;  // the op parameters and window a picking graph was built with.
  // Per output row, where a batch picks each row its own way (models/batch_session.h).
  std::vector<PickOptions> row_picks;

  friend bool operator==(const GraphKey&, const GraphKey&) = default;
};

// Writes `bytes` of a graph input from host memory (queued on the stream that runs the
// graph, where there is one).
using InputWriter = absl::FunctionRef<absl::Status(Tensor* t, const void* data, size_t bytes)>;

// One batch as the model describes it. The executor runs it as one piece, or cut into
// consecutive pieces each in a graph of its own (pipelined micro-batches), in order.
class Batch {
 public:
  virtual ~Batch() = default;
  virtual int64_t n_tokens() const = 0;
  virtual GraphKey Key(BatchPiece piece) const = 0;
  virtual absl::StatusOr<std::unique_ptr<LlamaGraph>> Build(BatchPiece piece) = 0;
  // Called before every run of the piece's graph, which may have been built for another
  // piece of the same key.
  virtual absl::Status FillInputs(const LlamaGraph& g, BatchPiece piece, InputWriter write) = 0;
  // After the piece's graph has run: reads what the caller asked of this piece.
  virtual absl::Status ReadResults(const LlamaGraph& g, BatchPiece piece) = 0;
};

inline BatchPiece WholeBatch(const Batch& batch) { return {0, batch.n_tokens()}; }

// Generation as the model describes it: steps of one token at consecutive positions from
// the model's next one, each picking the next token on the device (ARGMAX or SAMPLE). A step
// `ahead` is that many positions after the model's (steps queued whose picks are not handed
// over).
class PickSteps {
 public:
  virtual ~PickSteps() = default;
  // A step run on its own and read back (LlamaSession::DecodeGreedy, DecodeSample): the
  // pick after `token`; the model's position moves on.
  virtual absl::StatusOr<int32_t> DecodeOne(int32_t token) = 0;
  // OK when the step `ahead` can run: the context has room and `token` (nullptr: fed back
  // on the device) is in the vocabulary; otherwise Decode's OUT_OF_RANGE or
  // INVALID_ARGUMENT.
  virtual absl::Status Check(const int32_t* token, int64_t ahead) const = 0;
  // The step `ahead` as a batch of one token whose graph ends in a pick fed back into its
  // token input (GraphOutput::kArgmaxFedBack, kSampleFedBack); its token from the host, or
  // (nullptr) the pick the last run of that graph left there. Valid until the next call.
  virtual Batch& Step(const int32_t* token, int64_t ahead) = 0;
  // The oldest queued step's pick is handed over: the model's position moves on by one.
  virtual void Advance() = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs every piece of `batch` and reads its results.
  virtual absl::Status Run(Batch& batch) = 0;
  // Generation with LlamaSession::GenerateGreedy's contract: from `token`, hands each pick
  // to `on_token` until it returns false or max_tokens picks were handed over. Default: one
  // step at a time (DecodeOne), each read before the next is sent.
  virtual absl::Status Generate(PickSteps& steps, int32_t token, int64_t max_tokens,
                                absl::FunctionRef<bool(int32_t)> on_token);
  const DecodeTimings& timings() const { return timings_; }

 protected:
  DecodeTimings& mutable_timings() { return timings_; }
  static double MicrosSince(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
        .count();
  }

 private:
  DecodeTimings timings_;
};

struct ExecutorOptions {
  int n_copies = kDefaultPipelineCopies;  // several devices: micro-batches in flight.
  int64_t min_micro_batch = kMinMicroBatchTokens;  // several devices: fewest tokens of one.
  int greedy_batch = 0;                   // one device: SessionOptions::greedy_batch.
};

// A session's pipelining options as the executor takes them: n_copies 0 is
// kDefaultPipelineCopies, min_micro_batch 0 (or less) kMinMicroBatchTokens. INVALID_ARGUMENT
// for n_copies outside [0, kMaxSchedulerCopies].
absl::StatusOr<ExecutorOptions> PipelineOptions(int n_copies, int64_t min_micro_batch);

// The executor for `model`'s placement: its one device (with the host CPU for the nodes a
// non-CPU device has no kernel for, see FallbackExecutor), or scheduled over the devices of
// its layer split (in layer order, the scheduler's priority order).
absl::StatusOr<std::unique_ptr<Executor>> CreateExecutor(const LlamaModel& model,
                                                         const ExecutorOptions& options);

}  // namespace tg

#endif  // TENSORGRID_MODELS_EXECUTOR_H_
