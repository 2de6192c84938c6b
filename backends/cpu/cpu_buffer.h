// Host memory for the CPU device family: 64-byte aligned, zero-copy for tensors.
#ifndef TENSORGRID_BACKENDS_CPU_CPU_BUFFER_H_
#define TENSORGRID_BACKENDS_CPU_CPU_BUFFER_H_

#include <memory>
#include <string>

#include "core/backend.h"

namespace tg::cpu {

// Alignment of every CPU tensor: a cache line, enough for AVX-512 loads.
inline constexpr size_t kCpuAlignment = 64;

class CpuBufferType : public BufferType {
 public:
  explicit CpuBufferType(Device* device) : device_(device) {}
  absl::string_view name() const override { return "CPU"; }
  Device* device() const override { return device_; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  size_t alignment() const override { return kCpuAlignment; }
  bool is_host() const override { return true; }

 private:
  Device* device_;
};

class CpuBuffer : public BasicBuffer {
 public:
  CpuBuffer(BufferType* type, void* data, size_t size) : BasicBuffer(type, data, size) {}
  ~CpuBuffer() override;
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) override;
  // A strided memcpy.
  absl::Status SetTensor2D(Tensor* t, const void* data, const StridedRange& r) override {
    return HostSetTensor2D(t, data, r);
  }
  absl::Status GetTensor2D(const Tensor* t, void* data, const StridedRange& r) override {
    return HostGetTensor2D(t, data, r);
  }
  absl::Status CopyFrom(const Tensor* src, Tensor* dst) override;
  absl::Status Clear(uint8_t value) override;
};

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_CPU_BUFFER_H_
