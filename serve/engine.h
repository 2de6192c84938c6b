// Engine: the model a server serves and the one thread that decodes for every request — a
// BatchSession driven by a ContinuousBatcher (models/continuous_batcher.h). HTTP handler
// threads Submit requests and Cancel them (a client gone); the decode thread admits them at
// its next step, so requests decode together. Token callbacks run on the decode thread and
// must not block. Finished requests' sequences stay cached for the prompts that start like
// them (ContinuousBatcher's prompt reuse; EngineOptions::reuse_prompts turns it off).
// On a FailoverModel with failover on (tg-server --rpc-failover), a step that fails with an
// error naming a server of the plan does not end its requests: the decode thread drops the
// session, has the model loaded again on the devices left (FailoverModel::Recover), makes a
// new session and resumes every running request where it was (ContinuousBatcher::Suspend,
// Rebind); queued ones stay queued, cached sequences are dropped. When no device is left (or
// the model cannot be loaded again), every request ends with that error, as does every later
// one.
// The tokenizer is the engine's own (read from the model's file once), not the model's: a
// recovery replaces the model, and requests' text is made from tokens on the decode thread
// and from prompts on HTTP threads at any time, so what they read must outlive every model.
// Thread-safe: Submit, Cancel, tokenizer() and the counters from any thread.
#ifndef TENSORGRID_SERVE_ENGINE_H_
#define TENSORGRID_SERVE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "models/batch_session.h"
#include "models/continuous_batcher.h"
#include "models/failover_model.h"
#include "models/llama_model.h"
#include "models/tokenizer.h"

namespace tg::serve {

struct EngineOptions {
  BatchSessionOptions session;
  int64_t max_queued = 64;    // requests waiting beyond this are refused (RESOURCE_EXHAUSTED).
  int64_t max_running = 8;    // requests decoded together (tg-server --parallel).
  bool reuse_prompts = true;  // keep finished sequences for shared prefixes (--no-cache-prompt).
};

// One recovery of the engine (--rpc-failover): FailoverModel's event (its seconds: from the
// failed step to the new session), the engine's step that lost the server (counted from 1)
// and how many running requests resume.
struct EngineFailover {
  FailoverEvent event;
  int64_t step = 0;
  int64_t requests = 0;
};

class Engine {
 public:
  // Called on the decode thread after each recovery, before the requests go on.
  using OnFailover = std::function<void(const EngineFailover&)>;

  // Starts the decode thread on `model` (which must outlive the engine).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const LlamaModel& model,
                                                        const EngineOptions& options);
  // The same on a FailoverModel (which must outlive the engine, and which only the decode
  // thread uses from now on): with model.failover(), a lost server of its plan is recovered
  // from as the header says.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(FailoverModel& model,
                                                        const EngineOptions& options,
                                                        OnFailover on_failover = {});
  ~Engine();  // ends every request (CANCELLED) and joins the decode thread.

  // Queues a request; its id for Cancel. RESOURCE_EXHAUSTED when max_queued requests wait
  // (the request's callbacks are then not called).
  absl::StatusOr<int> Submit(GenerationRequest request);
  // Ends request `id` at the decode thread's next step (on_done gets CANCELLED).
  void Cancel(int id);

  // The model's tokenizer, the same for the engine's life (the model is not: see above).
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t failovers() const { return failovers_.load(); }  // recoveries so far.
  int64_t running() const { return running_.load(); }
  int64_t queued() const { return queued_.load(); }
  // Cells running requests hold; cells only cached (idle) sequences hold, free on demand.
  int64_t cells_used() const { return cells_used_.load(); }
  int64_t cells_cached() const { return cells_cached_.load(); }
  int64_t n_ctx() const { return options_.session.n_ctx; }

 private:
  Engine(const LlamaModel* model, FailoverModel* failover, const EngineOptions& options,
         OnFailover on_failover)
      : model_(model), failover_(failover), options_(options), on_failover_(on_failover) {}
  static absl::StatusOr<std::unique_ptr<Engine>> Start(std::unique_ptr<Engine> e);
  void Loop();
  // After a step failed with `error`, which failover_ can recover from: the requests resume on
  // a new session, or (no device left) end with the error, as does every later request.
  void Recover(const absl::Status& error, int64_t step);
  // The model now: model_, or failover_'s latest.
  const LlamaModel& model() const { return failover_ != nullptr ? failover_->model() : *model_; }

  const LlamaModel* const model_;  // without failover.
  FailoverModel* const failover_;  // else; its model() changes at each recovery.
  const EngineOptions options_;
  const OnFailover on_failover_;
  std::unique_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<BatchSession> session_;       // the decode thread's; null once broken_.
  std::unique_ptr<ContinuousBatcher> batcher_;  // the decode thread's alone.
  absl::Status broken_;  // the decode thread's: why no device is left (recovery failed).

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Handed to the decode thread at its next step: (engine id, request), ids to cancel.
  std::vector<std::pair<int, GenerationRequest>> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<int> cancels_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> running_{0}, queued_{0}, cells_used_{0}, cells_cached_{0}, failovers_{0};
  std::thread thread_;
};

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_ENGINE_H_
