// SplitPipeline: pipeline parallelism for the scheduler. One host thread per device runs the
// splits queued for that device, in submission order; the splits of one job run strictly one
// after another (split i starts when split i-1 has finished, on whatever device), so that a
// job is computed exactly as sequentially, while the splits of different jobs overlap: with
// layers on devices 0 and 1, device 0 runs job m+1's first split while device 1 runs job m's
// second. One thread per device is what lets devices whose Stream::Compute is synchronous
// (the CPU) work at the same time. Jobs must not share memory that one writes and another
// reads (the scheduler gives each job in flight its own compute memory).
// Thread-safe: Submit and Wait may be called from any thread.
#ifndef TENSORGRID_CORE_SCHEDULER_PIPELINE_H_
#define TENSORGRID_CORE_SCHEDULER_PIPELINE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "core/mutex.h"

namespace tg {

// A sequence of splits and how to run one. Owned by the caller; it must stay alive and
// unchanged from Submit until Wait returns.
struct PipelineJob {
  std::vector<int> split_worker;               // the device (worker) of each split, in order.
  std::function<absl::Status(int split)> run;  // runs a split on its worker's thread.

  // Progress, guarded by the pipeline's mutex.
  int done = 0;       // splits finished, in order.
  int remaining = 0;  // splits queued and not yet finished or skipped.
  absl::Status status;
};

class SplitPipeline {
 public:
  explicit SplitPipeline(int n_workers);
  ~SplitPipeline();  // finishes the queued work, then stops the threads.
  SplitPipeline(const SplitPipeline&) = delete;
  SplitPipeline& operator=(const SplitPipeline&) = delete;

  // Queues every split of `job` on its worker. A job's first failure skips its later splits.
  void Submit(PipelineJob* job);
  // Blocks until every split of `job` has run or been skipped; returns the first error.
  absl::Status Wait(PipelineJob* job);
  // Jobs submitted and not yet finished.
  int in_flight() const;

 private:
  struct Item {
    PipelineJob* job;
    int split;
  };
  void WorkerLoop(int worker) ABSL_LOCKS_EXCLUDED(mu_);

  // tg::Mutex (a std::mutex) rather than absl::Mutex: ThreadSanitizer sees through it
  // (core/mutex.h).
  mutable Mutex mu_;
  std::condition_variable changed_;  // a queue, a job's progress or stop_ changed.
  std::vector<std::deque<Item>> queues_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tg

#endif  // TENSORGRID_CORE_SCHEDULER_PIPELINE_H_
