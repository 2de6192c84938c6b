#include "server/device_lanes.h"

#include <algorithm>
#include <utility>

namespace tg::server {

DeviceLanes::DeviceLanes(int n_lanes)
    : n_lanes_(std::max(n_lanes, 1)), queues_(n_lanes_), threads_(n_lanes_) {}

DeviceLanes::~DeviceLanes() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.notify_all();
  // No lock: nothing submits any more, and the threads only end (a lane starts no thread).
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void DeviceLanes::Submit(std::vector<int> lanes, absl::AnyInvocable<void()> task) {
  std::sort(lanes.begin(), lanes.end());
  lanes.erase(std::unique(lanes.begin(), lanes.end()), lanes.end());
  auto t = std::make_shared<Task>(Task{std::move(lanes), std::move(task)});
  {
    MutexLock lock(&mu_);
    for (int lane : t->lanes) {
      queues_[lane].push_back(t);
      StartLocked(lane);
    }
    ++submitted_;
  }
  changed_.notify_all();
}

void DeviceLanes::Drain() {
  MutexLock lock(&mu_);
  changed_.wait(lock.native(),
                [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finished_ == submitted_; });
}

bool DeviceLanes::ReadyLocked(const Task& task) const {
  return std::all_of(task.lanes.begin(), task.lanes.end(),
                     [&](int lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                       return !queues_[lane].empty() && queues_[lane].front().get() == &task;
                     });
}

void DeviceLanes::StartLocked(int lane) {
  if (!threads_[lane].joinable()) threads_[lane] = std::thread([this, lane] { LaneLoop(lane); });
}

void DeviceLanes::LaneLoop(int lane) {
  MutexLock lock(&mu_);
  for (;;) {
    // A lane runs the task at its head when it is that task's first lane and the task heads
    // every other lane it names; a later lane of the task just waits for it to finish.
    changed_.wait(lock.native(), [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (queues_[lane].empty()) return stop_;
      const Task& head = *queues_[lane].front();
      return head.lanes.front() == lane && ReadyLocked(head);
    });
    if (queues_[lane].empty()) return;  // stop_ and nothing left.
    std::shared_ptr<Task> task = queues_[lane].front();
    lock.native().unlock();
    task->run();
    task->run = nullptr;  // what it captured goes now, outside the lock.
    lock.native().lock();
    for (int l : task->lanes) queues_[l].pop_front();
    ++finished_;
    changed_.notify_all();
  }
}

}  // namespace tg::server
