#include "serve/engine.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tg::serve {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const LlamaModel& model,
                                                       const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine(model, options));
  TG_ASSIGN_OR_RETURN(e->session_, BatchSession::Create(model, options.session));
  e->batcher_ = std::make_unique<ContinuousBatcher>(*e->session_, options.session.n_batch,
                                                    options.max_running, options.reuse_prompts);
  e->thread_ = std::thread([engine = e.get()] { engine->Loop(); });
  return e;
}

Engine::~Engine() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::StatusOr<int> Engine::Submit(GenerationRequest request) {
  absl::MutexLock lock(&mu_);
  const int64_t waiting = queued_.load() + static_cast<int64_t>(incoming_.size());
  if (waiting >= options_.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        waiting, " requests are waiting already (the most is ", options_.max_queued, ")"));
  }
  const int id = next_id_++;
  incoming_.emplace_back(id, std::move(request));
  return id;
}

void Engine::Cancel(int id) {
  absl::MutexLock lock(&mu_);
  cancels_.push_back(id);
}

void Engine::Loop() {
  absl::flat_hash_map<int, int> batcher_ids;  // engine id -> the batcher's, while it runs.
  for (;;) {
    std::vector<std::pair<int, GenerationRequest>> incoming;
    std::vector<int> cancels;
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this] {
        mu_.AssertHeld();
        return stop_ || !incoming_.empty() || !cancels_.empty();
      };
      if (batcher_->idle()) mu_.Await(absl::Condition(&work));
      stop = stop_;
      incoming.swap(incoming_);
      cancels.swap(cancels_);
    }
    for (auto& [request_id, request] : incoming) {
      // The id leaves the map when the request ends, on this thread. (A copy, not the
      // structured binding: C++20 lets a lambda capture one, clang 14 does not yet.)
      const auto id = request_id;
      auto done = std::move(request.on_done);
      request.on_done = [&batcher_ids, id, done = std::move(done)](const absl::Status& s) {
        batcher_ids.erase(id);
        if (done) done(s);
      };
      batcher_ids[id] = -1;
      const int batcher_id = batcher_->Submit(std::move(request));
      if (batcher_ids.contains(id)) batcher_ids[id] = batcher_id;  // not refused at once.
    }
    if (stop) {
      for (const auto& [id, batcher_id] : batcher_ids) cancels.push_back(id);
    }
    for (int id : cancels) {
      if (auto it = batcher_ids.find(id); it != batcher_ids.end()) batcher_->Cancel(it->second);
    }
    // A failed step has ended its requests with the error (their on_done); the rest go on.
    batcher_->Step().IgnoreError();
    running_ = batcher_->running();
    queued_ = batcher_->queued();
    cells_cached_ = batcher_->cached_cells();
    cells_used_ = session_->cells().used() - cells_cached_.load();
    if (stop && batcher_->idle()) return;
  }
}

}  // namespace tg::serve
