#include "client/upload_pool.h"

#include <utility>

#include "absl/time/clock.h"

namespace tg::rpc {

UploadPool::UploadPool(int n_threads, Runner runner) : runner_(std::move(runner)) {
  for (int i = 0; i < (n_threads < 1 ? 1 : n_threads); ++i)
    threads_.emplace_back([this] { Work(); });
}

UploadPool::~UploadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status UploadPool::Add(UploadJob job) {
  absl::MutexLock lock(&mu_);
  const uint64_t owned = job.bytes.size();
  auto room = [this, owned]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !error_.ok() || owned_bytes_ == 0 || owned_bytes_ + owned <= kMaxOwnedBytes;
  };
  mu_.Await(absl::Condition(&room));
  if (!error_.ok()) return error_;
  owned_bytes_ += owned;
  stats_.queued += job.size();
  queue_.push_back(std::move(job));
  return absl::OkStatus();
}

absl::Status UploadPool::Wait() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && running_ == 0; };
  mu_.Await(absl::Condition(&idle));
  absl::Status error = std::move(error_);
  error_ = absl::OkStatus();
  return error;
}

void UploadPool::RecordDone(uint64_t bytes, const UploadResult& result) {
  absl::MutexLock lock(&mu_);
  stats_.queued += bytes;
  Account(bytes, result);
}

void UploadPool::Account(uint64_t bytes, const UploadResult& result) {
  stats_.done += bytes;
  stats_.last_done = absl::Now();
  stats_.result.sent += result.sent;
  stats_.result.skipped += result.skipped;
  stats_.result.from_file += result.from_file;
}

UploadStats UploadPool::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void UploadPool::Work() {
  for (;;) {
    UploadJob job;
    bool skip = false;  // an earlier job failed: drain the queue without sending.
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stop_ and nothing left.
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      skip = !error_.ok();
    }
    absl::StatusOr<UploadResult> result = skip ? UploadResult{} : runner_(job);
    if (!skip && result.ok() && job.on_done) job.on_done(*result);
    absl::MutexLock lock(&mu_);
    --running_;
    owned_bytes_ -= job.bytes.size();
    Account(job.size(), result.ok() ? *result : UploadResult{});
    if (!result.ok() && error_.ok()) error_ = result.status();
  }
}

}  // namespace tg::rpc
