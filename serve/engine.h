// Engine: the model a server serves and the one thread that decodes for every request — a
// BatchSession driven by a ContinuousBatcher (models/continuous_batcher.h). HTTP handler
// threads Submit requests and Cancel them (a client gone); the decode thread admits them at
// its next step, so requests decode together. Token callbacks run on the decode thread and
// must not block. Finished requests' sequences stay cached for the prompts that start like
// them (ContinuousBatcher's prompt reuse; EngineOptions::reuse_prompts turns it off).
// Thread-safe: Submit, Cancel and the counters from any thread.
#ifndef TENSORGRID_SERVE_ENGINE_H_
#define TENSORGRID_SERVE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "models/batch_session.h"
#include "models/continuous_batcher.h"
#include "models/llama_model.h"

namespace tg::serve {

struct EngineOptions {
  BatchSessionOptions session;
  int64_t max_queued = 64;    // requests waiting beyond this are refused (RESOURCE_EXHAUSTED).
  int64_t max_running = 8;    // requests decoded together (tg-server --parallel).
  bool reuse_prompts = true;  // keep finished sequences for shared prefixes (--no-cache-prompt).
};

class Engine {
 public:
  // Starts the decode thread on `model` (which must outlive the engine).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const LlamaModel& model,
                                                        const EngineOptions& options);
  ~Engine();  // ends every request (CANCELLED) and joins the decode thread.

  // Queues a request; its id for Cancel. RESOURCE_EXHAUSTED when max_queued requests wait
  // (the request's callbacks are then not called).
  absl::StatusOr<int> Submit(GenerationRequest request);
  // Ends request `id` at the decode thread's next step (on_done gets CANCELLED).
  void Cancel(int id);

  const LlamaModel& model() const { return model_; }
  int64_t running() const { return running_.load(); }
  int64_t queued() const { return queued_.load(); }
  // Cells running requests hold; cells only cached (idle) sequences hold, free on demand.
  int64_t cells_used() const { return cells_used_.load(); }
  int64_t cells_cached() const { return cells_cached_.load(); }
  int64_t n_ctx() const { return options_.session.n_ctx; }

 private:
  Engine(const LlamaModel& model, const EngineOptions& options)
      : model_(model), options_(options) {}
  void Loop();

  const LlamaModel& model_;
  const EngineOptions options_;
  std::unique_ptr<BatchSession> session_;
  std::unique_ptr<ContinuousBatcher> batcher_;  // the decode thread's alone.

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Handed to the decode thread at its next step: (engine id, request), ids to cancel.
  std::vector<std::pair<int, GenerationRequest>> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<int> cancels_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> running_{0}, queued_{0}, cells_used_{0}, cells_cached_{0};
  std::thread thread_;
};

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_ENGINE_H_
