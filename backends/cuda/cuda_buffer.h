// Memory of the CUDA family: device memory of one GPU (CudaBufferType) and pinned host
// memory that every GPU transfers from at full speed (CudaHostBufferType, usable by the CPU
// as any host memory). Synchronous buffer calls use the legacy default stream, which waits
// for the work already queued on the device's streams (they are blocking streams) and which
// later stream work waits for: a Get after a stream's Compute sees its results.
// Thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_BUFFER_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_BUFFER_H_

#include <memory>
#include <string>

#include "core/backend.h"

namespace tg::cuda {

class CudaDevice;

// Every tensor is aligned to this: cudaMalloc's own alignment, enough for any vector load
// and for cuBLAS operands.
inline constexpr size_t kCudaAlignment = 256;

class CudaBufferType : public BufferType {
 public:
  explicit CudaBufferType(CudaDevice* device) : device_(device) {}
  absl::string_view name() const override;  // the device's name.
  Device* device() const override;
  // RESOURCE_EXHAUSTED naming the size and the device's free memory when it is not there
  // (or, for a slice of a split GPU, when its share is used up).
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  size_t alignment() const override { return kCudaAlignment; }
  size_t max_size() const override;  // the device's total memory (a slice's share).
  bool is_host() const override { return false; }

 private:
  CudaDevice* device_;
};

class MemoryShare;

class CudaBuffer : public BasicBuffer {
 public:
  // share: what the allocation was reserved from (released with the buffer); may be nullptr.
  CudaBuffer(CudaBufferType* type, int device_index, void* base, size_t size, MemoryShare* share)
      : BasicBuffer(type, base, size), device_index_(device_index), share_(share) {}
  ~CudaBuffer() override;
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) override;
  // One cudaMemcpy2D (copy_2d_plan.h says when it is a linear copy or row by row instead).
  absl::Status SetTensor2D(Tensor* t, const void* data, const StridedRange& r) override;
  absl::Status GetTensor2D(const Tensor* t, void* data, const StridedRange& r) override;
  // From host memory, this GPU or another GPU (peer copy); else UNIMPLEMENTED.
  absl::Status CopyFrom(const Tensor* src, Tensor* dst) override;
  absl::Status Clear(uint8_t value) override;

  int device_index() const { return device_index_; }

 private:
  int device_index_;
  MemoryShare* share_;
};

// Pinned (page-locked) host memory, shared by all CUDA devices of the process.
class CudaHostBufferType : public BufferType {
 public:
  absl::string_view name() const override { return "CUDA_Host"; }
  // The host's CPU device (the memory is host memory); nullptr before one is registered.
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  size_t alignment() const override { return kCudaAlignment; }
  bool is_host() const override { return true; }
};

// The GPU of a CUDA buffer (nullptr: not CUDA device memory).
const CudaBuffer* AsCudaBuffer(const Buffer* buffer);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_BUFFER_H_
