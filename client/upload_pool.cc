#include "client/upload_pool.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"

namespace tg::rpc {

UploadPool::UploadPool(int n_threads, Runner runner, std::string label, bool progress)
    : runner_(std::move(runner)),
      label_(std::move(label)),
      progress_(progress && isatty(STDERR_FILENO) == 1) {
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
  const uint64_t size = job.bytes.size();
  auto room = [this, size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !error_.ok() || in_flight_bytes_ == 0 || in_flight_bytes_ + size <= kMaxInFlightBytes;
  };
  mu_.Await(absl::Condition(&room));
  if (!error_.ok()) return error_;
  if (queue_.empty() && running_ == 0) {
    burst_total_ = burst_done_ = burst_skipped_ = 0;
    burst_start_ = last_report_ = absl::Now();
    reported_ = false;
  }
  in_flight_bytes_ += size;
  burst_total_ += size;
  queue_.push_back(std::move(job));
  return absl::OkStatus();
}

absl::Status UploadPool::Wait() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && running_ == 0; };
  mu_.Await(absl::Condition(&idle));
  if (reported_) ReportLocked(/*final=*/true);
  absl::Status error = std::move(error_);
  error_ = absl::OkStatus();
  return error;
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
    absl::MutexLock lock(&mu_);
    --running_;
    in_flight_bytes_ -= job.bytes.size();
    burst_done_ += job.bytes.size();
    if (!result.ok()) {
      if (error_.ok()) error_ = result.status();
    } else {
      burst_skipped_ += result->skipped;
    }
    if (progress_ && absl::Now() - last_report_ > absl::Milliseconds(200)) ReportLocked(false);
  }
}

void UploadPool::ReportLocked(bool final) {
  if (!progress_) return;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - burst_start_);
  const double mb = burst_done_ / 1e6;
  std::fprintf(stderr, "\rupload %s: %.1f / %.1f MB, %.1f MB/s, %.1f MB from the server's cache%s",
               label_.c_str(), mb, burst_total_ / 1e6, seconds > 0 ? mb / seconds : 0.0,
               burst_skipped_ / 1e6, final ? "\n" : "   ");
  std::fflush(stderr);
  last_report_ = absl::Now();
  reported_ = !final;
}

}  // namespace tg::rpc
