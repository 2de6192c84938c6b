#include "backends/cuda/cuda_buffer.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_format.h"
#include "backends/cuda/copy_2d_plan.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "core/registry.h"
#include "core/status_macros.h"

namespace tg::cuda {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Host memory with the CPU's ownership semantics, but pinned (cudaMallocHost).
class CudaHostBuffer : public BasicBuffer {
 public:
  CudaHostBuffer(BufferType* type, void* base, size_t size) : BasicBuffer(type, base, size) {}
  ~CudaHostBuffer() override {
    if (base() != nullptr) cudaFreeHost(base());
  }
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override {
    TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
    if (size == 0) return absl::OkStatus();  // `data` may be null (memcpy's may not).
    std::memcpy(static_cast<uint8_t*>(t->data) + offset, data, size);
    return absl::OkStatus();
  }
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override {
    TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
    if (size == 0) return absl::OkStatus();
    std::memcpy(data, static_cast<const uint8_t*>(t->data) + offset, size);
    return absl::OkStatus();
  }
  absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) override {
    TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
    std::memset(static_cast<uint8_t*>(t->data) + offset, value, size);
    return absl::OkStatus();
  }
  absl::Status SetTensor2D(Tensor* t, const void* data, const StridedRange& r) override {
    return HostSetTensor2D(t, data, r);
  }
  absl::Status GetTensor2D(const Tensor* t, void* data, const StridedRange& r) override {
    return HostGetTensor2D(t, data, r);
  }
  absl::Status Clear(uint8_t value) override {
    if (base() != nullptr) std::memset(base(), value, size());
    return absl::OkStatus();
  }
};

}  // namespace

const CudaBuffer* AsCudaBuffer(const Buffer* buffer) {
  return dynamic_cast<const CudaBuffer*>(buffer);
}

absl::string_view CudaBufferType::name() const { return device_->name(); }
Device* CudaBufferType::device() const { return device_; }
size_t CudaBufferType::max_size() const { return device_->memory().total; }

absl::StatusOr<std::unique_ptr<Buffer>> CudaBufferType::Allocate(size_t size) {
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_->index()));
  MemoryShare& share = device_->share();
  if (!share.TryReserve(size)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: cannot allocate %.1f MiB of device memory: %.1f MiB of its %.1f MiB share of the "
        "GPU are in use (TG_CUDA_DEVICES splits the GPU; use fewer slices for more each)",
        device_->name(), size / kMiB, share.used() / kMiB, share.limit() / kMiB));
  }
  void* base = nullptr;
  if (size > 0) {
    if (const cudaError_t err = cudaMalloc(&base, size); err != cudaSuccess) {
      share.Release(size);
      const absl::Status s = CudaError(err, "cudaMalloc");
      const DeviceMemory m = device_->memory();
      return absl::Status(
          s.code(), absl::StrFormat("%s: cannot allocate %.1f MiB of device memory (%.1f "
                                    "MiB free of %.1f MiB): %s",
                                    device_->name(), size / kMiB, m.free / kMiB, m.total / kMiB,
                                    s.message()));
    }
  }
  return std::unique_ptr<Buffer>(new CudaBuffer(this, device_->index(), base, size, &share));
}

CudaBuffer::~CudaBuffer() {
  if (share_ != nullptr) share_->Release(size());
  if (base() == nullptr) return;
  cudaSetDevice(device_index_);
  cudaFree(base());  // waits for the device's work on it; errors have nowhere to go.
}

absl::Status CudaBuffer::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  TG_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(static_cast<uint8_t*>(t->data) + offset, data, size, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CudaBuffer::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  TG_CUDA_RETURN_IF_ERROR(cudaMemcpy(data, static_cast<const uint8_t*>(t->data) + offset, size,
                                     cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaBuffer::SetTensor2D(Tensor* t, const void* data, const StridedRange& r) {
  TG_RETURN_IF_ERROR(CheckTensorRange2D(*t, r));
  const Copy2DPlan plan = PlanCopy2D(r);
  if (plan.kind == Copy2DPlan::Kind::kNone) return absl::OkStatus();
  if (plan.kind == Copy2DPlan::Kind::kRows) return Buffer::SetTensor2D(t, data, r);
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  uint8_t* dst = static_cast<uint8_t*>(t->data) + r.offset;
  if (plan.kind == Copy2DPlan::Kind::kLinear) {
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, data, plan.bytes, cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  TG_CUDA_RETURN_IF_ERROR(cudaMemcpy2D(dst, plan.device_pitch, data, plan.host_pitch, plan.width,
                                       plan.height, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CudaBuffer::GetTensor2D(const Tensor* t, void* data, const StridedRange& r) {
  TG_RETURN_IF_ERROR(CheckTensorRange2D(*t, r));
  const Copy2DPlan plan = PlanCopy2D(r);
  if (plan.kind == Copy2DPlan::Kind::kNone) return absl::OkStatus();
  if (plan.kind == Copy2DPlan::Kind::kRows) return Buffer::GetTensor2D(t, data, r);
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  const uint8_t* src = static_cast<const uint8_t*>(t->data) + r.offset;
  if (plan.kind == Copy2DPlan::Kind::kLinear) {
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpy(data, src, plan.bytes, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }
  TG_CUDA_RETURN_IF_ERROR(cudaMemcpy2D(data, plan.host_pitch, src, plan.device_pitch, plan.width,
                                       plan.height, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaBuffer::MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  TG_CUDA_RETURN_IF_ERROR(cudaMemset(static_cast<uint8_t*>(t->data) + offset, value, size));
  return absl::OkStatus();
}

absl::Status CudaBuffer::CopyFrom(const Tensor* src, Tensor* dst) {
  if (src->buffer == nullptr) return absl::FailedPreconditionError("copy from unplaced tensor");
  const size_t n = src->NumBytes();
  if (n != dst->NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s copy: %d bytes into %d", type()->name(), n, dst->NumBytes()));
  }
  TG_RETURN_IF_ERROR(CheckTensorRange(*src, 0, n));
  TG_RETURN_IF_ERROR(CheckTensorRange(*dst, 0, n));
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  if (src->buffer->type()->is_host()) {
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst->data, src->data, n, cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  const CudaBuffer* from = AsCudaBuffer(src->buffer);
  if (from == nullptr) return absl::UnimplementedError("CUDA: direct copy only from host or GPU");
  if (from->device_index_ == device_index_) {
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst->data, src->data, n, cudaMemcpyDeviceToDevice));
  } else {
    TG_CUDA_RETURN_IF_ERROR(
        cudaMemcpyPeer(dst->data, device_index_, src->data, from->device_index_, n));
  }
  return absl::OkStatus();
}

absl::Status CudaBuffer::Clear(uint8_t value) {
  if (base() == nullptr) return absl::OkStatus();
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index_));
  TG_CUDA_RETURN_IF_ERROR(cudaMemset(base(), value, size()));
  return absl::OkStatus();
}

Device* CudaHostBufferType::device() const { return Registry::Get().CpuDevice(); }

absl::StatusOr<std::unique_ptr<Buffer>> CudaHostBufferType::Allocate(size_t size) {
  void* base = nullptr;
  if (size > 0) {
    if (const cudaError_t err = cudaMallocHost(&base, size); err != cudaSuccess) {
      const absl::Status s = CudaError(err, "cudaMallocHost");
      return absl::Status(s.code(), absl::StrFormat("CUDA_Host: cannot pin %.1f MiB: %s",
                                                    size / kMiB, s.message()));
    }
  }
  return std::unique_ptr<Buffer>(new CudaHostBuffer(this, base, size));
}

}  // namespace tg::cuda
