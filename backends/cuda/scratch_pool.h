// ScratchPool: the temporary device memory of one CUDA stream (Q8_1 activations, weights
// dequantized to F16 for cuBLAS, contiguous copies of strided operands). A kernel's blocks go
// back to the pool as soon as the kernels that use them are queued: later work on the same
// stream runs after them (stream order), so reuse needs no synchronization. That is why a
// pool belongs to one stream and is not thread-safe.
//
// The bookkeeping is plain C++ over a DeviceAllocator, so unit tests run it without a GPU;
// the CUDA stream's allocator draws from the device's stream-ordered memory pool
// (cudaMallocAsync / cudaFreeAsync on the same stream).
#ifndef TENSORGRID_BACKENDS_CUDA_SCRATCH_POOL_H_
#define TENSORGRID_BACKENDS_CUDA_SCRATCH_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tg::cuda {

// Raw device memory for a pool.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // RESOURCE_EXHAUSTED (naming the size) when the memory is not there.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr, size_t bytes) = 0;
};

class ScratchPool {
 public:
  // Sizes are rounded up to this: cuBLAS and vector loads want 256-byte aligned operands.
  static constexpr size_t kGranularity = 256;

  // A piece of scratch; returns to the pool when destroyed. Move-only.
  class Block {
   public:
    Block() = default;
    Block(Block&& other) noexcept { *this = std::move(other); }
    Block& operator=(Block&& other) noexcept;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    ~Block() { Reset(); }

    void* get() const { return ptr_; }
    size_t size() const { return size_; }
    template <typename T>
    T* as() const {
      return static_cast<T*>(ptr_);
    }
    void Reset();  // gives the memory back now.

   private:
    friend class ScratchPool;
    Block(ScratchPool* pool, void* ptr, size_t size) : pool_(pool), ptr_(ptr), size_(size) {}
    ScratchPool* pool_ = nullptr;
    void* ptr_ = nullptr;
    size_t size_ = 0;
  };

  // Keeps up to max_cached_bytes of returned blocks for reuse.
  ScratchPool(DeviceAllocator* allocator, size_t max_cached_bytes)
      : allocator_(allocator), max_cached_(max_cached_bytes) {}
  ~ScratchPool();  // frees the cached blocks (every Block must be gone by then).
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  // The smallest cached block that fits, else a new one; when the device is out of memory,
  // the cache is freed and the allocation tried once more.
  absl::StatusOr<Block> Acquire(size_t bytes);
  void Trim();  // frees every cached block.

  size_t in_use_bytes() const { return in_use_; }
  size_t cached_bytes() const { return cached_; }
  size_t peak_bytes() const { return peak_; }  // most in use + cached at any time.
  int64_t device_allocations() const { return allocations_; }

 private:
  struct Entry {
    void* ptr;
    size_t size;
  };
  void Release(void* ptr, size_t size);
  void FreeEntry(size_t index);

  DeviceAllocator* allocator_;
  size_t max_cached_;
  std::vector<Entry> cached_blocks_;
  size_t in_use_ = 0;
  size_t cached_ = 0;
  size_t peak_ = 0;
  int64_t allocations_ = 0;
};

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_SCRATCH_POOL_H_
