#include "backends/cuda/cuda_stream.h"

#include <chrono>
#include <cstring>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_buffer.h"
#include "backends/cuda/cuda_event.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_status.h"
#include "core/status_macros.h"

namespace tg::cuda {
namespace {

// Scratch a stream keeps for reuse between nodes: the largest temporaries are weights
// dequantized to F16 for one GEMM (a 4096 x 14336 matrix is 112 MiB), so this holds a few.
constexpr size_t kMaxCachedScratch = size_t{512} << 20;
// Index-checking nodes whose descriptions a stream keeps between two Synchronize calls
// (about 64 bytes each); later ones are reported without their name.
constexpr size_t kMaxCheckedNodes = size_t{1} << 16;
constexpr double kMiB = 1024.0 * 1024.0;

using Clock = std::chrono::steady_clock;

// Scratch from the device's stream-ordered memory pool (cudaMallocAsync on the stream), or
// plain cudaMalloc where the device has no memory pools.
class StreamAllocator : public DeviceAllocator {
 public:
  StreamAllocator(const CudaDevice* device, cudaStream_t stream)
      : device_(device), stream_(stream) {}
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* p = nullptr;
    const bool async = device_->memory_pools();
    const cudaError_t err = async ? cudaMallocAsync(&p, bytes, stream_) : cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      const absl::Status s = CudaError(err, async ? "cudaMallocAsync" : "cudaMalloc");
      return absl::Status(s.code(), absl::StrFormat("%s: cannot allocate %.1f MiB of scratch: %s",
                                                    device_->name(), bytes / kMiB, s.message()));
    }
    return p;
  }
  void Free(void* ptr, size_t) override {
    if (device_->memory_pools()) {
      cudaFreeAsync(ptr, stream_);
    } else {
      cudaFree(ptr);
    }
  }

 private:
  const CudaDevice* device_;
  cudaStream_t stream_;
};

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaStream>> CudaStream::Create(CudaDevice* device) {
  std::unique_ptr<CudaStream> s(new CudaStream(device));
  if (absl::Status st = s->Init(); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(device->name(), ": ", st.message()));
  }
  return s;
}

absl::Status CudaStream::Init() {
  TG_RETURN_IF_ERROR(Select());
  // A blocking stream: it orders with the legacy default stream of the buffer calls.
  TG_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&stream_));
  if (absl::StatusOr<const CublasApi*> blas = Cublas(); blas.ok()) {
    blas_ = *blas;
    TG_CUBLAS_RETURN_IF_ERROR(blas_->create(&cublas_));
    TG_CUBLAS_RETURN_IF_ERROR(blas_->set_stream(cublas_, stream_));
  } else {
    static absl::once_flag once;
    absl::call_once(once, [&] {
      CudaNotice(absl::StrCat(blas.status().message(),
                              "; large matrix products run the matrix-vector kernel"));
    });
  }
  allocator_ = std::make_unique<StreamAllocator>(device_, stream_);
  pool_ = std::make_unique<ScratchPool>(allocator_.get(), kMaxCachedScratch);
  void* dev = nullptr;
  TG_CUDA_RETURN_IF_ERROR(cudaMalloc(&dev, sizeof(ErrorRecord)));
  device_error_ = static_cast<ErrorRecord*>(dev);
  TG_CUDA_RETURN_IF_ERROR(cudaMemset(device_error_, 0, sizeof(ErrorRecord)));
  void* host = nullptr;
  TG_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host, sizeof(ErrorRecord)));
  host_error_ = static_cast<ErrorRecord*>(host);
  std::memset(host_error_, 0, sizeof(ErrorRecord));
  return absl::OkStatus();
}

CudaStream::~CudaStream() {
  if (!Select().ok()) return;  // the device is gone: nothing left to free on it.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  pool_.reset();  // frees in stream order, before the stream goes.
  if (cublas_ != nullptr) blas_->destroy(cublas_);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  if (device_error_ != nullptr) cudaFree(device_error_);
  if (host_error_ != nullptr) cudaFreeHost(host_error_);
}

absl::Status CudaStream::Select() const {
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_->index()));
  return absl::OkStatus();
}

bool CudaStream::InThisDevice(const Tensor* t) const {
  const CudaBuffer* b = t->buffer != nullptr ? AsCudaBuffer(t->buffer) : nullptr;
  return b != nullptr && b->device_index() == device_->index();
}

absl::Status CudaStream::SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) {
  if (!InThisDevice(t)) return Stream::SetTensorAsync(t, data, offset, size);
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  TG_RETURN_IF_ERROR(Select());
  // From pageable memory the copy returns once the bytes are staged: data may be reused.
  TG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(t->data) + offset, data, size,
                                          cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaStream::GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) {
  if (!InThisDevice(t)) return Stream::GetTensorAsync(t, data, offset, size);
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  TG_RETURN_IF_ERROR(Select());
  TG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data, static_cast<const char*>(t->data) + offset, size,
                                          cudaMemcpyDeviceToHost, stream_));
  return absl::OkStatus();
}

absl::Status CudaStream::CopyTensorAsync(const Tensor* src, Tensor* dst) {
  if (!InThisDevice(dst) || src->buffer == nullptr) {
    return absl::UnimplementedError("CUDA: async copy only into this device's memory");
  }
  const size_t n = src->NumBytes();
  if (n != dst->NumBytes()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s copy: %s (%d bytes) into %s (%d bytes)",
                                                      device_->name(), DescribeTensor(*src), n,
                                                      DescribeTensor(*dst), dst->NumBytes()));
  }
  TG_RETURN_IF_ERROR(CheckTensorRange(*src, 0, n));
  TG_RETURN_IF_ERROR(CheckTensorRange(*dst, 0, n));
  TG_RETURN_IF_ERROR(Select());
  const CudaBuffer* from = AsCudaBuffer(src->buffer);
  if (from != nullptr && from->device_index() == device_->index()) {
    TG_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst->data, src->data, n, cudaMemcpyDeviceToDevice, stream_));
  } else if (from != nullptr) {
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(dst->data, device_->index(), src->data,
                                                from->device_index(), n, stream_));
  } else if (src->buffer->type()->is_host()) {
    TG_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst->data, src->data, n, cudaMemcpyHostToDevice, stream_));
  } else {
    return absl::UnimplementedError("CUDA: async copy only from host or CUDA memory");
  }
  return absl::OkStatus();
}

absl::Status CudaStream::Synchronize() {
  const Clock::time_point start = Clock::now();
  TG_RETURN_IF_ERROR(Select());
  absl::Status s = CudaError(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  stats_.compute_us += MicrosSince(start);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(device_->name(), ": ", s.message()));
  return TakeKernelError();
}

absl::Status CudaStream::TakeKernelError() {
  if (!error_copy_queued_) return absl::OkStatus();
  error_copy_queued_ = false;
  const ErrorRecord rec = *host_error_;
  std::vector<std::string> nodes = std::move(checked_nodes_);
  checked_nodes_.clear();
  if (rec.code == kKernelOk) return absl::OkStatus();
  std::memset(host_error_, 0, sizeof(ErrorRecord));
  TG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(device_error_, 0, sizeof(ErrorRecord), stream_));
  const std::string node = rec.node >= 0 && static_cast<size_t>(rec.node) < nodes.size()
                               ? nodes[rec.node]
                               : std::string("an index-checking node");
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s: %s %d out of range [0, %d)", device_->name(), node,
                      rec.code == kBadExpertId ? "expert id" : "row index", rec.value, rec.limit));
}

absl::Status CudaStream::Compute(Graph& graph) {
  const Clock::time_point start = Clock::now();
  TG_RETURN_IF_ERROR(Select());
  bool checks = false;
  for (Tensor* node : graph.nodes) {
    if (IsViewOp(node->op) || node->NumElements() == 0) continue;
    if (node->data == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(device_->name(), ": node ", DescribeTensor(*node), " has no memory"));
    }
    NodeContext ctx{stream_, blas_, cublas_, pool_.get(), {}};
    if (ChecksIndices(*node)) {
      checks = true;
      ctx.err.record = device_error_;
      ctx.err.node =
          checked_nodes_.size() < kMaxCheckedNodes ? static_cast<int>(checked_nodes_.size()) : -1;
      if (ctx.err.node >= 0) {
        checked_nodes_.push_back(absl::StrCat(DescribeTensor(*node), ": ", OpName(node->op)));
      }
    }
    if (absl::Status s = RunNode(ctx, node); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat(device_->name(), ": ", DescribeTensor(*node), ": ", s.message()));
    }
  }
  if (checks) {
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_error_, device_error_, sizeof(ErrorRecord),
                                            cudaMemcpyDeviceToHost, stream_));
    error_copy_queued_ = true;
  }
  stats_.compute_us += MicrosSince(start);
  ++stats_.splits;
  return absl::OkStatus();
}

absl::Status CudaStream::RecordEvent(Event* event) {
  auto* e = dynamic_cast<CudaEvent*>(event);
  if (e == nullptr) return absl::UnimplementedError("CUDA: not a CUDA event");
  if (e->device_index() != device_->index()) {
    return absl::InvalidArgumentError(absl::StrCat(device_->name(), ": an event of CUDA device ",
                                                   e->device_index(), " cannot be recorded here"));
  }
  TG_RETURN_IF_ERROR(Select());
  TG_CUDA_RETURN_IF_ERROR(cudaEventRecord(e->get(), stream_));
  return absl::OkStatus();
}

absl::Status CudaStream::WaitEvent(Event* event) {
  auto* e = dynamic_cast<CudaEvent*>(event);
  if (e == nullptr) return absl::UnimplementedError("CUDA: not a CUDA event");
  TG_RETURN_IF_ERROR(Select());
  TG_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, e->get(), 0));
  return absl::OkStatus();
}

}  // namespace tg::cuda
