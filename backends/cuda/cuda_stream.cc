#include "backends/cuda/cuda_stream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/copy_2d_plan.h"
#include "backends/cuda/cuda_buffer.h"
#include "backends/cuda/cuda_event.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/fusion.h"
#include "core/status_macros.h"

namespace tg::cuda {
namespace {

// A kLinear or kPitched plan's copy between host and device memory (kind says which way);
// the pitches are dst's and src's.
absl::Status CopyPlanned(const Copy2DPlan& plan, void* dst, size_t dst_pitch, const void* src,
                         size_t src_pitch, cudaMemcpyKind kind, cudaStream_t stream) {
  if (plan.kind == Copy2DPlan::Kind::kLinear) {
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, plan.bytes, kind, stream));
    return absl::OkStatus();
  }
  TG_CUDA_RETURN_IF_ERROR(
      cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, plan.width, plan.height, kind, stream));
  return absl::OkStatus();
}

// Scratch a stream keeps for reuse between nodes: the largest temporaries are weights
// dequantized to F16 for one GEMM (a 4096 x 14336 matrix is 112 MiB), so this holds a few.
constexpr size_t kMaxCachedScratch = size_t{512} << 20;
// Scratch a captured graph may own: decode graphs need Q8_1 activations (kilobytes); more
// means a graph that should not stay captured with its scratch pinned.
constexpr size_t kMaxCaptureScratch = size_t{64} << 20;
// Index-checking nodes whose descriptions a stream keeps between two Synchronize calls
// (about 64 bytes each); later ones are reported without their name.
constexpr size_t kMaxCheckedNodes = size_t{1} << 16;
constexpr double kMiB = 1024.0 * 1024.0;

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Scratch from the device's stream-ordered memory pool (the virtual device's own pool when
// the GPU is split; plain cudaMalloc where the device has no memory pools), within the
// device's memory share.
class StreamAllocator : public DeviceAllocator {
 public:
  StreamAllocator(CudaDevice* device, cudaStream_t stream) : device_(device), stream_(stream) {}
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (!device_->share().TryReserve(bytes)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: cannot allocate %.1f MiB of scratch: its share of the GPU (%.1f "
                          "MiB, TG_CUDA_DEVICES) is used up",
                          device_->name(), bytes / kMiB, device_->share().limit() / kMiB));
    }
    void* p = nullptr;
    const char* call = "cudaMalloc";
    cudaError_t err;
    if (device_->memory_pool() != nullptr) {
      call = "cudaMallocFromPoolAsync";
      err = cudaMallocFromPoolAsync(&p, bytes, device_->memory_pool(), stream_);
    } else if (device_->memory_pools()) {
      call = "cudaMallocAsync";
      err = cudaMallocAsync(&p, bytes, stream_);
    } else {
      err = cudaMalloc(&p, bytes);
    }
    if (err != cudaSuccess) {
      device_->share().Release(bytes);
      const absl::Status s = CudaError(err, call);
      return absl::Status(s.code(), absl::StrFormat("%s: cannot allocate %.1f MiB of scratch: %s",
                                                    device_->name(), bytes / kMiB, s.message()));
    }
    return p;
  }
  void Free(void* ptr, size_t bytes) override {
    if (device_->memory_pool() != nullptr || device_->memory_pools()) {
      cudaFreeAsync(ptr, stream_);
    } else {
      cudaFree(ptr);
    }
    device_->share().Release(bytes);
  }

 private:
  CudaDevice* device_;
  cudaStream_t stream_;
};

// A captured graph's scratch: plain device memory that lives as long as the capture (its
// kernels use the same addresses at every replay). Allocated while capturing (relaxed
// capture mode allows it); never freed before the capture goes, since freeing synchronizes.
// Failures are FAILED_PRECONDITION, not RESOURCE_EXHAUSTED: the pool must not trim (free)
// blocks the capture already refers to; the capture is abandoned instead.
class CaptureAllocator : public DeviceAllocator {
 public:
  explicit CaptureAllocator(CudaDevice* device) : device_(device) {}
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (used_ + bytes > kMaxCaptureScratch || !device_->share().TryReserve(bytes)) {
      return absl::FailedPreconditionError("a captured graph's scratch would be too large");
    }
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      device_->share().Release(bytes);
      return absl::FailedPreconditionError("cudaMalloc failed while capturing");
    }
    used_ += bytes;
    return p;
  }
  void Free(void* ptr, size_t bytes) override {
    cudaFree(ptr);
    device_->share().Release(bytes);
    used_ -= bytes;
  }

 private:
  CudaDevice* device_;
  size_t used_ = 0;
};

absl::Status IndexError(absl::string_view device, const ErrorRecord& rec,
                        const std::vector<std::string>& nodes) {
  const std::string node = rec.node >= 0 && static_cast<size_t>(rec.node) < nodes.size()
                               ? nodes[rec.node]
                               : std::string("an index-checking node");
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s: %s %d out of range [0, %d)", device, node,
                      rec.code == kBadExpertId ? "expert id" : "row index", rec.value, rec.limit));
}

}  // namespace

// A CUDA graph captured from a CudaStream, with what its kernels use beyond the graph's
// tensors: its scratch and its own error record (device and pinned host copy).
class CudaCapture : public CapturedGraph {
 public:
  explicit CudaCapture(CudaStream* owner) : owner_(owner) {}
  ~CudaCapture() override {
    owner_->CaptureDropped(this);
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    pool_.reset();
    if (device_error_ != nullptr) cudaFree(device_error_);
    if (host_error_ != nullptr) cudaFreeHost(host_error_);
  }

  absl::Status Init(CudaDevice* device) {
    allocator_ = std::make_unique<CaptureAllocator>(device);
    pool_ = std::make_unique<ScratchPool>(allocator_.get(), SIZE_MAX);
    void* dev = nullptr;
    TG_CUDA_RETURN_IF_ERROR(cudaMalloc(&dev, sizeof(ErrorRecord)));
    device_error_ = static_cast<ErrorRecord*>(dev);
    // On the owner's stream, not the legacy one: a slice of the same GPU may be capturing in
    // another thread, and legacy-stream work would break its capture.
    TG_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(device_error_, 0, sizeof(ErrorRecord), owner_->stream_));
    void* host = nullptr;
    TG_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host, sizeof(ErrorRecord)));
    host_error_ = static_cast<ErrorRecord*>(host);
    std::memset(host_error_, 0, sizeof(ErrorRecord));
    return absl::OkStatus();
  }

  CudaStream* owner_;
  cudaGraphExec_t exec_ = nullptr;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<ScratchPool> pool_;
  ErrorRecord* device_error_ = nullptr;
  ErrorRecord* host_error_ = nullptr;
  std::vector<std::string> checked_nodes_;  // by ErrorSink::node, local to this graph.
  bool checks_ = false;
};

CudaStream::CudaStream(CudaDevice* device)
    : device_(device), captures_(CurrentCudaTuning().graphs) {}

absl::StatusOr<std::unique_ptr<CudaStream>> CudaStream::Create(CudaDevice* device) {
  std::unique_ptr<CudaStream> s(new CudaStream(device));
  if (absl::Status st = s->Init(); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(device->name(), ": ", st.message()));
  }
  return s;
}

absl::Status CudaStream::Init() {
  TG_RETURN_IF_ERROR(Select());
  paths_.cc = device_->compute_capability();
  paths_.tuning = CurrentCudaTuning();
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
  captures_.Clear();           // each waits for the stream before freeing its memory.
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

absl::Status CudaStream::SetTensor2DAsync(Tensor* t, const void* data, const StridedRange& r) {
  if (!InThisDevice(t)) return Stream::SetTensor2DAsync(t, data, r);
  TG_RETURN_IF_ERROR(CheckTensorRange2D(*t, r));
  const Copy2DPlan plan = PlanCopy2D(r);
  if (plan.kind == Copy2DPlan::Kind::kNone) return absl::OkStatus();
  if (plan.kind == Copy2DPlan::Kind::kRows) return Stream::SetTensor2DAsync(t, data, r);
  TG_RETURN_IF_ERROR(Select());
  char* dst = static_cast<char*>(t->data) + r.offset;
  return CopyPlanned(plan, dst, plan.device_pitch, data, plan.host_pitch, cudaMemcpyHostToDevice,
                     stream_);
}

absl::Status CudaStream::GetTensor2DAsync(const Tensor* t, void* data, const StridedRange& r) {
  if (!InThisDevice(t)) return Stream::GetTensor2DAsync(t, data, r);
  TG_RETURN_IF_ERROR(CheckTensorRange2D(*t, r));
  const Copy2DPlan plan = PlanCopy2D(r);
  if (plan.kind == Copy2DPlan::Kind::kNone) return absl::OkStatus();
  if (plan.kind == Copy2DPlan::Kind::kRows) return Stream::GetTensor2DAsync(t, data, r);
  TG_RETURN_IF_ERROR(Select());
  const char* src = static_cast<const char*>(t->data) + r.offset;
  return CopyPlanned(plan, data, plan.host_pitch, src, plan.device_pitch, cudaMemcpyDeviceToHost,
                     stream_);
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
  absl::Status first = std::move(dropped_error_);
  dropped_error_ = absl::OkStatus();
  for (CudaCapture* c : std::exchange(replayed_checks_, {})) {
    absl::Status e = TakeCaptureError(c);
    if (first.ok()) first = std::move(e);
  }
  absl::Status eager = TakeKernelError();
  return first.ok() ? eager : first;
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
  return IndexError(device_->name(), rec, nodes);
}

absl::Status CudaStream::TakeCaptureError(CudaCapture* c) {
  const ErrorRecord rec = *c->host_error_;
  if (rec.code == kKernelOk) return absl::OkStatus();
  // Errors stay in the record (first one wins) until read here: replays queued after the
  // failing one copied the same record.
  std::memset(c->host_error_, 0, sizeof(ErrorRecord));
  TG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(c->device_error_, 0, sizeof(ErrorRecord), stream_));
  return IndexError(device_->name(), rec, c->checked_nodes_);
}

void CudaStream::CaptureDropped(CudaCapture* c) {
  auto it = std::find(replayed_checks_.begin(), replayed_checks_.end(), c);
  if (it == replayed_checks_.end()) return;
  replayed_checks_.erase(it);
  // Its replays may still run: their error record is read before it is freed.
  if (cudaStreamSynchronize(stream_) != cudaSuccess) return;
  absl::Status s = TakeCaptureError(c);
  if (dropped_error_.ok()) dropped_error_ = std::move(s);
}

NodeContext CudaStream::BaseContext(ScratchPool* pool) const {
  NodeContext ctx;
  ctx.stream = stream_;
  ctx.blas = blas_;
  ctx.cublas = cublas_;
  ctx.pool = pool;
  ctx.paths = paths_;
  return ctx;
}

absl::Status CudaStream::QueueNodes(Graph& graph, ScratchPool* pool, ErrorRecord* record,
                                    std::vector<std::string>* names, bool* checks) {
  FusionOptions fusion;
  fusion.enabled = paths_.tuning.fusion;
  fusion.max_gate_up_tokens = kMatVecMaxColumns;
  const FusionPlan plan = PlanFusions(graph, fusion);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Tensor* node = graph.nodes[i];
    if (!LaunchesWork(*node)) continue;
    if (node->data == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(device_->name(), ": node ", DescribeTensor(*node), " has no memory"));
    }
    const FusedStep& step = plan.steps[i];
    if (step.kind == FusionKind::kSkip) continue;
    NodeContext ctx = BaseContext(pool);
    if (step.kind == FusionKind::kNone && ChecksIndices(*node)) {
      *checks = true;
      ctx.err.record = record;
      ctx.err.node = names->size() < kMaxCheckedNodes ? static_cast<int>(names->size()) : -1;
      if (ctx.err.node >= 0) {
        names->push_back(absl::StrCat(DescribeTensor(*node), ": ", OpName(node->op)));
      }
    }
    absl::Status s = step.kind == FusionKind::kNone ? RunNode(ctx, node) : RunFused(ctx, step);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat(device_->name(), ": ", DescribeTensor(*node), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaStream::RunEager(Graph& graph) {
  bool checks = false;
  TG_RETURN_IF_ERROR(QueueNodes(graph, pool_.get(), device_error_, &checked_nodes_, &checks));
  if (checks) {
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_error_, device_error_, sizeof(ErrorRecord),
                                            cudaMemcpyDeviceToHost, stream_));
    error_copy_queued_ = true;
  }
  return absl::OkStatus();
}

std::unique_ptr<CudaCapture> CudaStream::CaptureAndLaunch(Graph& graph) {
  auto capture = std::make_unique<CudaCapture>(this);
  if (!capture->Init(device_).ok()) {
    cudaGetLastError();
    return nullptr;
  }
  // Relaxed: the capture's scratch is allocated (cudaMalloc) while capturing.
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  absl::Status queued = QueueNodes(graph, capture->pool_.get(), capture->device_error_,
                                   &capture->checked_nodes_, &capture->checks_);
  if (queued.ok() && capture->checks_) {
    queued = CudaError(cudaMemcpyAsync(capture->host_error_, capture->device_error_,
                                       sizeof(ErrorRecord), cudaMemcpyDeviceToHost, stream_),
                       "cudaMemcpyAsync");
  }
  cudaGraph_t cuda_graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &cuda_graph);  // always ends it.
  bool ok = queued.ok() && ended == cudaSuccess && cuda_graph != nullptr;
  if (ok) ok = cudaGraphInstantiate(&capture->exec_, cuda_graph, 0) == cudaSuccess;
  if (cuda_graph != nullptr) cudaGraphDestroy(cuda_graph);
  if (ok) ok = cudaGraphLaunch(capture->exec_, stream_) == cudaSuccess;
  if (!ok) {
    cudaGetLastError();  // a refused capture leaves no sticky error: the graph runs eagerly.
    return nullptr;
  }
  if (capture->checks_) replayed_checks_.push_back(capture.get());
  return capture;
}

absl::Status CudaStream::Replay(CudaCapture* c) {
  TG_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(c->exec_, stream_));
  if (c->checks_ &&
      std::find(replayed_checks_.begin(), replayed_checks_.end(), c) == replayed_checks_.end()) {
    replayed_checks_.push_back(c);
  }
  return absl::OkStatus();
}

absl::Status CudaStream::Compute(Graph& graph) {
  const Clock::time_point start = Clock::now();
  TG_RETURN_IF_ERROR(Select());
  bool capturable = captures_.enabled();
  for (size_t i = 0; capturable && i < graph.nodes.size(); ++i) {
    capturable = !PromptSized(*graph.nodes[i], paths_.tuning.graph_max_tokens);
  }
  const GraphCaptureCache::Decision d = captures_.Decide(graph, capturable);
  absl::Status s;
  switch (d.action) {
    case GraphCaptureCache::Action::kReplay:
      s = Replay(static_cast<CudaCapture*>(d.captured));
      break;
    case GraphCaptureCache::Action::kCapture: {
      std::unique_ptr<CudaCapture> capture = CaptureAndLaunch(graph);
      const bool captured = capture != nullptr;
      captures_.Captured(graph, std::move(capture));
      if (!captured) s = RunEager(graph);
      break;
    }
    case GraphCaptureCache::Action::kEager:
      s = RunEager(graph);
      break;
  }
  TG_RETURN_IF_ERROR(s);
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
