#include "serve/engine.h"

#include <chrono>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tg::serve {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const LlamaModel& model,
                                                       const EngineOptions& options) {
  return Start(std::unique_ptr<Engine>(new Engine(&model, nullptr, options, {})));
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(FailoverModel& model,
                                                       const EngineOptions& options,
                                                       OnFailover on_failover) {
  return Start(
      std::unique_ptr<Engine>(new Engine(nullptr, &model, options, std::move(on_failover))));
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(std::unique_ptr<Engine> e) {
  // A copy of the model's tokenizer that no recovery replaces (the header says why).
  TG_ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromGguf(e->model().file()));
  TG_ASSIGN_OR_RETURN(e->session_, BatchSession::Create(e->model(), e->options_.session));
  e->batcher_ =
      std::make_unique<ContinuousBatcher>(*e->session_, e->options_.session.n_batch,
                                          e->options_.max_running, e->options_.reuse_prompts);
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

void Engine::Recover(const absl::Status& error, int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  // The session goes before the model is loaded again (FailoverModel's rule); the running
  // requests wait at the queue's front with what they generated.
  const int64_t resumed = batcher_->Suspend();
  session_.reset();
  absl::Status failed = error;
  // A new session that loses another server goes without it too (each round drops one).
  for (;;) {
    absl::StatusOr<FailoverEvent> event = failover_->Recover(failed);
    if (!event.ok()) {
      failed = event.status();
      break;
    }
    absl::StatusOr<std::unique_ptr<BatchSession>> session =
        BatchSession::Create(failover_->model(), options_.session);
    if (session.ok()) {
      session_ = *std::move(session);
      batcher_->Rebind(*session_);
      event->seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      failovers_.fetch_add(1);
      if (on_failover_) on_failover_({*std::move(event), step, resumed});
      return;
    }
    failed = session.status();
    if (!failover_->Recoverable(failed)) break;
  }
  broken_ = failed;
  batcher_->EndAll(broken_);
}

void Engine::Loop() {
  absl::flat_hash_map<int, int> batcher_ids;  // engine id -> the batcher's, while it runs.
  int64_t steps = 0;
  std::function<bool(const absl::Status&)> recoverable;
  if (failover_ != nullptr && failover_->failover()) {
    recoverable = [this](const absl::Status& e) { return failover_->Recoverable(e); };
  }
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
      if (!broken_.ok()) {  // no device left to serve it.
        if (request.on_done) request.on_done(broken_);
        continue;
      }
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
    // A failed step has ended its requests with the error (their on_done), unless failover
    // recovers from it; the rest go on.
    if (!batcher_->idle()) {
      ++steps;
      if (absl::Status s = batcher_->Step(recoverable); !s.ok() && recoverable && recoverable(s)) {
        Recover(s, steps);
      }
    }
    running_ = batcher_->running();
    queued_ = batcher_->queued();
    if (session_ != nullptr) {
      cells_cached_ = batcher_->cached_cells();
      cells_used_ = session_->cells().used() - cells_cached_.load();
    } else {
      cells_cached_ = 0;
      cells_used_ = 0;
    }
    if (stop && batcher_->idle()) return;
  }
}

}  // namespace tg::serve
