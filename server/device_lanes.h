// DeviceLanes: one execution thread ("lane") per device of a session, so that work on
// different devices of one rpc-server runs at the same time while the work of one device
// keeps the order it was submitted in. A task names the lanes whose memory it touches (a
// copy between two devices names both); it runs once every task submitted before it on
// any of those lanes has finished, and those lanes wait for it. So any two tasks that share
// a lane run in submission order, and tasks on disjoint lanes overlap: the session's
// commands give the results of running them one after another.
// Thread-safety: Submit and Drain may be called from any thread; tasks run on the lanes'
// threads. Every field is guarded by mu_ (the tasks themselves run outside it).
#ifndef TENSORGRID_SERVER_DEVICE_LANES_H_
#define TENSORGRID_SERVER_DEVICE_LANES_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "core/mutex.h"

namespace tg::server {

class DeviceLanes {
 public:
  // Lanes start their threads on first use, so a session that never submits costs none.
  explicit DeviceLanes(int n_lanes);
  ~DeviceLanes();  // runs everything submitted, then stops the threads.
  DeviceLanes(const DeviceLanes&) = delete;
  DeviceLanes& operator=(const DeviceLanes&) = delete;

  int size() const { return n_lanes_; }
  // Queues `task` behind every earlier task of each lane in `lanes` (indices in [0, size()),
  // at least one; repeats are ignored). It runs on the thread of the lowest of them.
  void Submit(std::vector<int> lanes, absl::AnyInvocable<void()> task) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until no task is queued or running (tasks submitted meanwhile included).
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Task {
    std::vector<int> lanes;  // sorted, unique; lanes[0]'s thread runs it.
    absl::AnyInvocable<void()> run;
  };
  // True when `task` heads the queue of every lane it names.
  bool ReadyLocked(const Task& task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartLocked(int lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LaneLoop(int lane) ABSL_LOCKS_EXCLUDED(mu_);

  const int n_lanes_;
  // A std::mutex underneath rather than absl::Mutex: ThreadSanitizer sees through it (as in
  // core/scheduler_pipeline.h), and the condition variable waits on it (core/mutex.h).
  Mutex mu_;
  std::condition_variable changed_;  // a queue or stop_ changed.
  std::vector<std::deque<std::shared_ptr<Task>>> queues_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);  // joinable once started.
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_DEVICE_LANES_H_
