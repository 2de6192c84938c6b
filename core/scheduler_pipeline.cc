#include "core/scheduler_pipeline.h"

#include <utility>

namespace tg {

SplitPipeline::SplitPipeline(int n_workers) {
  queues_.resize(n_workers);
  threads_.reserve(n_workers);
  for (int w = 0; w < n_workers; ++w) threads_.emplace_back([this, w] { WorkerLoop(w); });
}

SplitPipeline::~SplitPipeline() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void SplitPipeline::Submit(PipelineJob* job) {
  {
    MutexLock lock(&mu_);
    job->done = 0;
    job->remaining = static_cast<int>(job->split_worker.size());
    job->status = absl::OkStatus();
    if (job->remaining > 0) ++in_flight_;
    for (int i = 0; i < job->remaining; ++i) queues_[job->split_worker[i]].push_back({job, i});
  }
  changed_.notify_all();
}

absl::Status SplitPipeline::Wait(PipelineJob* job) {
  MutexLock lock(&mu_);
  while (job->remaining > 0) changed_.wait(lock.native());
  return job->status;
}

int SplitPipeline::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

void SplitPipeline::WorkerLoop(int worker) {
  for (;;) {
    Item item;
    bool skip;
    {
      MutexLock lock(&mu_);
      while (queues_[worker].empty() && !stop_) changed_.wait(lock.native());
      if (queues_[worker].empty()) return;  // stopping, and nothing left to do.
      item = queues_[worker].front();
      queues_[worker].pop_front();
      // Queues are in submission order, so the split this one waits for is either done or
      // at the head of another worker's queue: no cycle.
      while (item.job->done != item.split && item.job->status.ok()) changed_.wait(lock.native());
      skip = !item.job->status.ok();
    }
    absl::Status status = skip ? absl::OkStatus() : item.job->run(item.split);
    {
      MutexLock lock(&mu_);
      // Moved, so that no status representation is shared with this thread.
      if (!status.ok() && item.job->status.ok()) item.job->status = std::move(status);
      if (!skip) item.job->done = item.split + 1;
      if (--item.job->remaining == 0) --in_flight_;
    }
    changed_.notify_all();
  }
}

}  // namespace tg
