// Test helper: CountingCpuDevice, a CPU device whose memory reports how many bytes its live
// buffers hold, by usage (weights, compute, ...). It measures what a meta device really
// allocates on each of its devices without asking the meta device. A buffer's usage is set
// after it is allocated, so it is read when counting. Thread-safe.
#ifndef TENSORGRID_META_MEMORY_TESTING_H_
#define TENSORGRID_META_MEMORY_TESTING_H_

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "backends/cpu/cpu_buffer.h"
#include "backends/cpu/cpu_device.h"

namespace tg::meta {

class CountingBufferType : public BufferType {
 public:
  explicit CountingBufferType(Device* device) : device_(device) {}
  absl::string_view name() const override { return "COUNTING"; }
  Device* device() const override { return device_; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override {
    const size_t rounded =
        (size + cpu::kCpuAlignment - 1) / cpu::kCpuAlignment * cpu::kCpuAlignment;
    void* data = rounded == 0 ? nullptr : std::aligned_alloc(cpu::kCpuAlignment, rounded);
    if (data == nullptr && rounded != 0) return absl::ResourceExhaustedError("COUNTING: no memory");
    auto buffer = std::make_unique<Counted>(this, data, size);
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(buffer.get());
    return std::unique_ptr<Buffer>(std::move(buffer));
  }
  size_t alignment() const override { return cpu::kCpuAlignment; }
  bool is_host() const override { return true; }

  // Bytes held by live buffers of this usage.
  size_t BytesHeld(BufferUsage usage) const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t bytes = 0;
    for (const Buffer* b : live_) bytes += b->usage() == usage ? b->size() : 0;
    return bytes;
  }

 private:
  // A CPU buffer (its destructor frees the data) that leaves the count when destroyed.
  class Counted : public cpu::CpuBuffer {
   public:
    Counted(CountingBufferType* type, void* data, size_t size)
        : cpu::CpuBuffer(type, data, size), owner_(type) {}
    ~Counted() override {
      std::lock_guard<std::mutex> lock(owner_->mu_);
      owner_->live_.erase(this);
    }

   private:
    CountingBufferType* owner_;
  };

  Device* device_;
  mutable std::mutex mu_;
  absl::flat_hash_set<const Buffer*> live_;
};

class CountingCpuDevice : public cpu::CpuDevice {
 public:
  explicit CountingCpuDevice(std::string name, int n_threads = 1)
      : cpu::CpuDevice(name, name, n_threads) {}
  BufferType* default_buffer_type() override { return &type_; }
  size_t BytesHeld(BufferUsage usage) const { return type_.BytesHeld(usage); }

 private:
  CountingBufferType type_{this};
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_MEMORY_TESTING_H_
