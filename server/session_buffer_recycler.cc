#include "server/session_buffer_recycler.h"

#include <utility>
#include <vector>

#include "absl/time/clock.h"

namespace tg::server {

SessionBufferRecycler::SessionBufferRecycler(uint64_t max_bytes, absl::Duration keep_time)
    : max_bytes_(max_bytes), keep_time_(keep_time) {
  if (max_bytes_ > 0) expirer_ = std::thread([this] { Expire(); });
}

SessionBufferRecycler::~SessionBufferRecycler() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (expirer_.joinable()) expirer_.join();
  ReleaseAll();
}

void SessionBufferRecycler::Keep(std::unique_ptr<Buffer> buffer, uint64_t size) {
  if (buffer == nullptr || size < kMinBytes || size > max_bytes_ || !buffer->type()->is_host()) {
    return;  // freed here.
  }
  std::vector<std::unique_ptr<Buffer>> freed;  // outside the lock: munmap takes a while.
  absl::MutexLock lock(&mu_);
  kept_.push_back({std::move(buffer), size, absl::Now() + keep_time_});
  kept_bytes_ += size;
  while (kept_bytes_ > max_bytes_) PopOldestLocked(&freed);
}

void SessionBufferRecycler::PopOldestLocked(std::vector<std::unique_ptr<Buffer>>* freed) {
  kept_bytes_ -= kept_.front().size;
  freed->push_back(std::move(kept_.front().buffer));
  kept_.pop_front();
}

std::unique_ptr<Buffer> SessionBufferRecycler::Take(const BufferType* type, uint64_t size) {
  absl::MutexLock lock(&mu_);
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
    if (it->size == size && it->buffer->type() == type) {
      std::unique_ptr<Buffer> buffer = std::move(it->buffer);
      kept_bytes_ -= size;
      kept_.erase(std::next(it).base());
      return buffer;
    }
  }
  return nullptr;
}

uint64_t SessionBufferRecycler::ReleaseAll() {
  std::deque<Kept> freed;
  {
    absl::MutexLock lock(&mu_);
    freed.swap(kept_);
    kept_bytes_ = 0;
  }
  uint64_t bytes = 0;
  for (const Kept& k : freed) bytes += k.size;
  return bytes;
}

uint64_t SessionBufferRecycler::kept_bytes() const {
  absl::MutexLock lock(&mu_);
  return kept_bytes_;
}

uint64_t SessionBufferRecycler::kept_bytes(const BufferType* type) const {
  absl::MutexLock lock(&mu_);
  uint64_t bytes = 0;
  for (const Kept& k : kept_) bytes += k.buffer->type() == type ? k.size : 0;
  return bytes;
}

void SessionBufferRecycler::Expire() {
  for (;;) {
    std::vector<std::unique_ptr<Buffer>> freed;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time next = kept_.empty() ? absl::InfiniteFuture() : kept_.front().until;
      auto due = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        // A stop, or a first entry other than the one waited for (taken, or kept anew).
        return stop_ ||
               (kept_.empty() ? next != absl::InfiniteFuture() : kept_.front().until != next);
      };
      mu_.AwaitWithDeadline(absl::Condition(&due), next);
      if (stop_) return;
      const absl::Time now = absl::Now();
      while (!kept_.empty() && kept_.front().until <= now) PopOldestLocked(&freed);
    }
  }
}

}  // namespace tg::server
