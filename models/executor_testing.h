// Helpers for the executor tests (models/executor.h): a toy model small enough to check on
// the host, described to an executor the way LlamaSession describes its batches and greedy
// steps, and a CPU device with events (the CPU has none) so that greedy steps are queued
// ahead without a remote server. Header-only: the models library must not link tests' code.
#ifndef TENSORGRID_MODELS_EXECUTOR_TESTING_H_
#define TENSORGRID_MODELS_EXECUTOR_TESTING_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/cpu_stream.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "models/executor.h"
#include "models/llama_graph.h"

namespace tg::testing {

inline constexpr int64_t kToyVocab = 8;

// The object a StatusOr holds, or null after a failed expectation showing its status.
template <typename T>
std::unique_ptr<T> ValueOrNull(absl::StatusOr<std::unique_ptr<T>> created) {
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? std::move(*created) : nullptr;
}

// The toy model: logits of token t = table[t] + bias, with the table on one device and the
// bias on another (a graph then spans both). Row t peaks at (3t + 1) mod kToyVocab; the
// rest is small and uneven, so that every logit differs.
class ToyModel {
 public:
  static absl::StatusOr<std::unique_ptr<ToyModel>> Create(Device* table_device,
                                                          Device* bias_device) {
    auto m = std::unique_ptr<ToyModel>(new ToyModel());
    for (int64_t t = 0; t < kToyVocab; ++t) {
      for (int64_t j = 0; j < kToyVocab; ++j) {
        m->table_host_.push_back(j == (3 * t + 1) % kToyVocab ? 4.0f
                                                              : 0.1f * ((t * 5 + j * 3) % 7));
      }
      m->bias_host_.push_back(0.05f * static_cast<float>(t));
    }
    TG_ASSIGN_OR_RETURN(m->table, m->Upload(table_device, {kToyVocab, kToyVocab}, m->table_host_));
    TG_ASSIGN_OR_RETURN(m->bias, m->Upload(bias_device, {kToyVocab}, m->bias_host_));
    return m;
  }

  // Computed on the host.
  float Logit(int32_t token, int64_t j) const {
    return table_host_[token * kToyVocab + j] + bias_host_[j];
  }
  int32_t HostArgmax(int32_t token) const {
    int32_t best = 0;
    for (int32_t j = 1; j < kToyVocab; ++j) {
      if (Logit(token, j) > Logit(token, best)) best = j;
    }
    return best;
  }
  // The greedy chain from `token`: n picks, each the host argmax after the one before.
  std::vector<int32_t> HostChain(int32_t token, int n) const {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(token = HostArgmax(token));
    return out;
  }
  // What Generate leaves in got = {token} after n picks: `token`, then its HostChain.
  std::vector<int32_t> HostChainFrom(int32_t token, int n) const {
    std::vector<int32_t> out = {token};
    for (int32_t t : HostChain(token, n)) out.push_back(t);
    return out;
  }

  Tensor* table = nullptr;  // F32 [kToyVocab, kToyVocab]
  Tensor* bias = nullptr;   // F32 [kToyVocab]

 private:
  ToyModel() = default;
  absl::StatusOr<Tensor*> Upload(Device* device, std::initializer_list<int64_t> ne,
                                 const std::vector<float>& data) {
    TG_ASSIGN_OR_RETURN(Tensor * t, ctx_.NewTensor(DType::kF32, ne));
    TG_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                        device->default_buffer_type()->Allocate(t->NumBytes()));
    buffer->set_usage(BufferUsage::kWeights);  // the scheduler runs a node beside its weight.
    TG_RETURN_IF_ERROR(PlaceTensor(buffer.get(), t, 0));
    TG_RETURN_IF_ERROR(buffer->SetTensor(t, data.data(), 0, t->NumBytes()));
    buffers_.push_back(std::move(buffer));
    return t;
  }

  Context ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<float> table_host_;
  std::vector<float> bias_host_;
};

// A batch of toy tokens at n_past: every row's logits (kLogits) or argmax (kArgmax), or one
// step that feeds its argmax back into its token input (kArgmaxFedBack; tokens empty: the
// token is on the device already). Its key's n_kv is n_past + size rounded up to `block`,
// as a session's kv_pad does. Counts what the executor asks of it.
class ToyBatch : public Batch {
 public:
  ToyBatch(const ToyModel& model, std::vector<int32_t> tokens, int64_t n_past,
           GraphOutput output = GraphOutput::kLogits, int64_t block = 4)
      : model_(model), tokens_(std::move(tokens)), n_past_(n_past), output_(output), block_(block) {
    logits.assign(n_tokens() * kToyVocab, -1.0f);
    argmax.assign(n_tokens(), -1);
  }

  int64_t n_tokens() const override {
    return tokens_.empty() ? 1 : static_cast<int64_t>(tokens_.size());
  }
  GraphKey Key(BatchPiece piece) const override {
    const int64_t end = n_past_ + piece.offset + piece.size;
    return {
        .n_tokens = piece.size, .n_kv = (end + block_ - 1) / block_ * block_, .output = output_};
  }
  absl::StatusOr<std::unique_ptr<LlamaGraph>> Build(BatchPiece piece) override {
    built.push_back(piece);
    if (also_count_builds != nullptr) ++*also_count_builds;
    if (static_cast<int>(built.size()) == fail_build) return absl::InternalError("build failed");
    if (tokens_.empty()) {
      // A new graph's token input holds nothing: a step fed back must run the graph of the
      // step before it.
      return absl::FailedPreconditionError("a step fed back on the device needs a built graph");
    }
    auto g = std::make_unique<LlamaGraph>();
    g->n_tokens = piece.size;
    g->n_kv = Key(piece).n_kv;
    g->output = output_;
    TG_ASSIGN_OR_RETURN(g->tokens, g->ctx.NewTensor(DType::kI32, {piece.size}));
    g->tokens->flags |= kFlagInput;
    TG_ASSIGN_OR_RETURN(Tensor * rows, GetRows(g->ctx, model_.table, g->tokens));
    TG_ASSIGN_OR_RETURN(g->logits, Add(g->ctx, rows, model_.bias));
    if (output_ == GraphOutput::kLogits) {
      TG_ASSIGN_OR_RETURN(g->graph, BuildGraph({g->logits}));
      return g;
    }
    TG_ASSIGN_OR_RETURN(g->pick, Argmax(g->ctx, g->logits));
    if (output_ == GraphOutput::kArgmax) {
      TG_ASSIGN_OR_RETURN(g->graph, BuildGraph({g->pick}));
      return g;
    }
    TG_ASSIGN_OR_RETURN(Tensor * feed, Cpy(g->ctx, g->pick, g->tokens));
    TG_ASSIGN_OR_RETURN(g->graph, BuildGraph({feed}));
    g->pick->flags |= kFlagOutput;
    return g;
  }
  absl::Status FillInputs(const LlamaGraph& g, BatchPiece piece, InputWriter write) override {
    ++fills;
    if (tokens_.empty()) return absl::OkStatus();
    return write(g.tokens, tokens_.data() + piece.offset, piece.size * sizeof(int32_t));
  }
  absl::Status ReadResults(const LlamaGraph& g, BatchPiece piece) override {
    read.push_back(piece);
    if (output_ == GraphOutput::kLogits) {
      return g.logits->buffer->GetTensor(g.logits, logits.data() + piece.offset * kToyVocab, 0,
                                         g.logits->NumBytes());
    }
    if (output_ == GraphOutput::kArgmax) {
      return g.pick->buffer->GetTensor(g.pick, argmax.data() + piece.offset, 0, g.pick->NumBytes());
    }
    return absl::OkStatus();  // the executor reads a fed-back step's pick.
  }

  std::vector<BatchPiece> built;  // pieces whose graph was built, in order.
  std::vector<BatchPiece> read;   // pieces whose results were read, in order.
  int fills = 0;
  int fail_build = 0;  // the build that fails (1: the first; 0: none).
  int* also_count_builds = nullptr;
  std::vector<float> logits;    // [n_tokens * kToyVocab] (kLogits)
  std::vector<int32_t> argmax;  // [n_tokens] (kArgmax)

 private:
  const ToyModel& model_;
  std::vector<int32_t> tokens_;
  int64_t n_past_;
  GraphOutput output_;
  int64_t block_;
};

// Checks every row of `batch`'s logits (kLogits) against the host's for `tokens`.
inline void ExpectHostLogits(const ToyModel& model, const ToyBatch& batch,
                             const std::vector<int32_t>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int64_t j = 0; j < kToyVocab; ++j) {
      ASSERT_EQ(batch.logits[i * kToyVocab + j], model.Logit(tokens[i], j))
          << "row " << i << " column " << j;
    }
  }
}

// Greedy decoding of the toy model as a session does it: a position that advances with each
// pick, a context of n_ctx positions, steps in graphs of `block` positions. DecodeOne runs
// its step through `executor` as a batch of its own.
class ToyGreedy : public PickSteps {
 public:
  ToyGreedy(const ToyModel& model, Executor& executor, int64_t n_ctx, int64_t block = 4)
      : model_(model), executor_(executor), n_ctx_(n_ctx), block_(block) {}

  absl::StatusOr<int32_t> DecodeOne(int32_t token) override {
    ++decoded_one;
    TG_RETURN_IF_ERROR(Check(&token, 0));
    ToyBatch step(model_, {token}, n_past, GraphOutput::kArgmax, block_);
    TG_RETURN_IF_ERROR(executor_.Run(step));
    ++n_past;
    return step.argmax[0];
  }
  absl::Status Check(const int32_t* token, int64_t ahead) const override {
    if (token != nullptr && (*token < 0 || *token >= kToyVocab)) {
      return absl::InvalidArgumentError("token outside the toy vocabulary");
    }
    if (n_past + ahead + 1 > n_ctx_) return absl::OutOfRangeError("toy context full");
    return absl::OkStatus();
  }
  Batch& Step(const int32_t* token, int64_t ahead) override {
    std::vector<int32_t> tokens;
    if (token != nullptr) tokens.push_back(*token);
    step_ = std::make_unique<ToyBatch>(model_, std::move(tokens), n_past + ahead,
                                       GraphOutput::kArgmaxFedBack, block_);
    step_->also_count_builds = &step_builds;
    return *step_;
  }
  void Advance() override { ++n_past; }

  int64_t n_past = 0;
  int decoded_one = 0;  // DecodeOne calls.
  int step_builds = 0;  // graphs built for steps queued ahead.

 private:
  const ToyModel& model_;
  Executor& executor_;
  int64_t n_ctx_;
  int64_t block_;
  std::unique_ptr<ToyBatch> step_;
};

// A token callback for the Generate calls: appends each pick to `got` and asks for more until
// `got` holds `stop_at` tokens.
inline auto AppendTo(std::vector<int32_t>& got, size_t stop_at = SIZE_MAX) {
  return [&got, stop_at](int32_t t) {
    got.push_back(t);
    return got.size() < stop_at;
  };
}

// Executor::Generate from got.back(), appending every pick to `got`; stops once `got` holds
// `stop_at` tokens.
inline absl::Status Generate(Executor& e, PickSteps& steps, int64_t max_tokens,
                             std::vector<int32_t>& got, size_t stop_at = SIZE_MAX) {
  return e.Generate(steps, got.back(), max_tokens, AppendTo(got, stop_at));
}

// Generates up to max_tokens greedy picks with `steps` after `first` and expects Generate to
// end with `code` after the host's first n picks, n positions used.
inline void ExpectGenerationEnds(const ToyModel& model, Executor& e, ToyGreedy& steps,
                                 int32_t first, int64_t max_tokens, absl::StatusCode code, int n) {
  std::vector<int32_t> got = {first};
  const absl::Status end = Generate(e, steps, max_tokens, got);
  ASSERT_EQ(end.code(), code) << end;
  EXPECT_EQ(got, model.HostChainFrom(first, n));
  EXPECT_EQ(steps.n_past, n);
}

// A CPU device with events and a stream that counts what it is asked. CPU work is done
// when Compute returns, so an event has happened once recorded; the `fail_wait`-th wait
// (1: the first) fails with INTERNAL; each wait records how many graphs had been computed by
// then. CreateEvent returns `create_event` when it is not OK.
// SupportsOp refuses `refused_op` (kNone: nothing), as a GPU without some kernel does.
class EventCpuDevice : public cpu::CpuDevice {
 public:
  explicit EventCpuDevice(std::string name, absl::Status create_event = absl::OkStatus())
      : cpu::CpuDevice(name, "test:" + name, 1), create_event_(std::move(create_event)) {}

  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    if (!create_event_.ok()) return create_event_;
    return std::make_unique<CountedEvent>(this);
  }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::make_unique<CountingStream>(this);
  }
  bool SupportsOp(const Tensor& node) const override {
    return (refused_op == Op::kNone || node.op != refused_op) && cpu::CpuDevice::SupportsOp(node);
  }

  Op refused_op = Op::kNone;
  int computes = 0;                 // graphs computed.
  std::vector<int> batch_computes;  // graphs computed in each Stream batch.
  int events_recorded = 0;
  int waits = 0;
  std::vector<int> computes_at_wait;
  int fail_wait = 0;

 private:
  class CountedEvent : public Event {
   public:
    explicit CountedEvent(EventCpuDevice* device) : device_(device) {}
    absl::Status Synchronize() override {
      device_->computes_at_wait.push_back(device_->computes);
      if (++device_->waits == device_->fail_wait) return absl::InternalError("injected wait error");
      return absl::OkStatus();
    }

   private:
    EventCpuDevice* device_;
  };
  class CountingStream : public cpu::CpuStream {
   public:
    explicit CountingStream(EventCpuDevice* device)
        : cpu::CpuStream(device, device->threads()), device_(device) {}
    absl::Status Compute(Graph& graph) override {
      ++device_->computes;
      if (in_batch_) ++device_->batch_computes.back();
      return cpu::CpuStream::Compute(graph);
    }
    absl::Status RecordEvent(Event* event) override {
      ++device_->events_recorded;
      return absl::OkStatus();
    }
    void BeginBatch() override {
      in_batch_ = true;
      device_->batch_computes.push_back(0);
    }
    absl::Status EndBatch() override {
      in_batch_ = false;
      return absl::OkStatus();
    }

   private:
    EventCpuDevice* device_;
    bool in_batch_ = false;
  };

  absl::Status create_event_;
};

}  // namespace tg::testing

#endif  // TENSORGRID_MODELS_EXECUTOR_TESTING_H_
