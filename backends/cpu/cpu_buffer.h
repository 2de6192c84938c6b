// Host memory for the CPU device family: 64-byte aligned, zero-copy for tensors; and
// read-only buffers over memory the caller keeps (a mapped model file: weights used where they
// lie). Thread-safety as core/backend.h's Buffer.
#ifndef TENSORGRID_BACKENDS_CPU_CPU_BUFFER_H_
#define TENSORGRID_BACKENDS_CPU_CPU_BUFFER_H_

#include <memory>
#include <string>

#include "core/backend.h"

namespace tg::cpu {

// Alignment of every CPU tensor: a cache line, enough for AVX-512 loads.
inline constexpr size_t kCpuAlignment = 64;

// Alignment of tensors used in place in host memory the caller gives (a mapped GGUF file aligns
// its tensors to 32 bytes by default): the kernels load weights unaligned, only their own
// scratch needs kCpuAlignment.
inline constexpr size_t kCpuMappedAlignment = 32;

// The memory of CpuMappedBuffers: host memory of the device, tensors kCpuMappedAlignment-aligned;
// it allocates nothing of its own (Allocate is UNIMPLEMENTED).
class CpuMappedBufferType : public BufferType {
 public:
  explicit CpuMappedBufferType(Device* device) : device_(device) {}
  absl::string_view name() const override { return "CPU_Mapped"; }
  Device* device() const override { return device_; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override {
    return absl::UnimplementedError("CPU_Mapped: memory comes from FromHostPtr only");
  }
  size_t alignment() const override { return kCpuMappedAlignment; }
  bool is_host() const override { return true; }
  // A CpuMappedBuffer; INVALID_ARGUMENT when data is not kCpuMappedAlignment-aligned.
  absl::StatusOr<std::unique_ptr<Buffer>> FromHostPtr(const void* data, size_t size) override;

 private:
  Device* device_;
};

class CpuBufferType : public BufferType {
 public:
  explicit CpuBufferType(Device* device) : device_(device), mapped_(device) {}
  absl::string_view name() const override { return "CPU"; }
  Device* device() const override { return device_; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  size_t alignment() const override { return kCpuAlignment; }
  bool is_host() const override { return true; }
  // A CpuMappedBuffer (of CpuMappedBufferType: tensors in it need only kCpuMappedAlignment).
  absl::StatusOr<std::unique_ptr<Buffer>> FromHostPtr(const void* data, size_t size) override {
    return mapped_.FromHostPtr(data, size);
  }

 private:
  Device* device_;
  CpuMappedBufferType mapped_;
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

// A read-only buffer over host memory it does not own (FromHostPtr): reads are memcpys, every
// write is FAILED_PRECONDITION (the memory may be a read-only mapping).
class CpuMappedBuffer : public BasicBuffer {
 public:
  CpuMappedBuffer(BufferType* type, const void* data, size_t size)
      : BasicBuffer(type, const_cast<void*>(data), size) {}
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) override;
  absl::Status SetTensor2D(Tensor* t, const void* data, const StridedRange& r) override;
  absl::Status GetTensor2D(const Tensor* t, void* data, const StridedRange& r) override {
    return HostGetTensor2D(t, data, r);
  }
  absl::Status Clear(uint8_t value) override;
};

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_CPU_BUFFER_H_
