#include "backends/cuda/scratch_pool.h"

#include <algorithm>
#include <utility>

namespace tg::cuda {

ScratchPool::Block& ScratchPool::Block::operator=(Block&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::exchange(other.pool_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void ScratchPool::Block::Reset() {
  if (pool_ != nullptr) pool_->Release(ptr_, size_);
  pool_ = nullptr;
  ptr_ = nullptr;
  size_ = 0;
}

ScratchPool::~ScratchPool() { Trim(); }

absl::StatusOr<ScratchPool::Block> ScratchPool::Acquire(size_t bytes) {
  const size_t size = std::max<size_t>(1, (bytes + kGranularity - 1) / kGranularity) * kGranularity;
  size_t best = cached_blocks_.size();
  for (size_t i = 0; i < cached_blocks_.size(); ++i) {
    if (cached_blocks_[i].size >= size &&
        (best == cached_blocks_.size() || cached_blocks_[i].size < cached_blocks_[best].size)) {
      best = i;
    }
  }
  if (best != cached_blocks_.size()) {
    const Entry e = cached_blocks_[best];
    cached_blocks_.erase(cached_blocks_.begin() + static_cast<std::ptrdiff_t>(best));
    cached_ -= e.size;
    in_use_ += e.size;
    return Block(this, e.ptr, e.size);
  }
  absl::StatusOr<void*> ptr = allocator_->Allocate(size);
  if (!ptr.ok() && absl::IsResourceExhausted(ptr.status()) && !cached_blocks_.empty()) {
    Trim();  // what the cache holds may be just what the device lacks.
    ptr = allocator_->Allocate(size);
  }
  if (!ptr.ok()) return ptr.status();
  ++allocations_;
  in_use_ += size;
  peak_ = std::max(peak_, in_use_ + cached_);
  return Block(this, *ptr, size);
}

void ScratchPool::Release(void* ptr, size_t size) {
  in_use_ -= size;
  cached_blocks_.push_back({ptr, size});
  cached_ += size;
  // Over the limit: the largest blocks go first (they are the rarest to fit again).
  while (cached_ > max_cached_ && !cached_blocks_.empty()) {
    size_t largest = 0;
    for (size_t i = 1; i < cached_blocks_.size(); ++i) {
      if (cached_blocks_[i].size > cached_blocks_[largest].size) largest = i;
    }
    FreeEntry(largest);
  }
}

void ScratchPool::FreeEntry(size_t index) {
  const Entry e = cached_blocks_[index];
  cached_blocks_.erase(cached_blocks_.begin() + static_cast<std::ptrdiff_t>(index));
  cached_ -= e.size;
  allocator_->Free(e.ptr, e.size);
}

void ScratchPool::Trim() {
  while (!cached_blocks_.empty()) FreeEntry(cached_blocks_.size() - 1);
}

}  // namespace tg::cuda
