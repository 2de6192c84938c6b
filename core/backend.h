// The backend interfaces every device family implements (CPU, CUDA, Vulkan, remote RPC):
// BufferType -> Buffer (memory), Device (what a device is and can do), Stream (an execution
// queue on a device), Event, Collectives. Each is a small interface; optional entries have
// a documented default (usually UNIMPLEMENTED or nullptr) so callers can discover them.
// Every fallible call returns absl::Status: bad input never aborts the process.
// Thread-safety: Device and BufferType are thread-safe; a Buffer may be used from several
// threads on disjoint tensors; a Stream is used by one thread at a time.
#ifndef TENSORGRID_CORE_BACKEND_H_
#define TENSORGRID_CORE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/graph.h"
#include "core/strided_range.h"
#include "core/tensor.h"
#include "core/weight_source.h"

namespace tg {

class Buffer;
class Device;
class Stream;

enum class DeviceType { kCpu, kGpu, kIgpu, kAccel, kRemote };
absl::string_view DeviceTypeName(DeviceType type);

// A kind of memory on a device (device-local, host-pinned, ...).
class BufferType {
 public:
  virtual ~BufferType() = default;
  virtual absl::string_view name() const = 0;  // e.g. "CPU", "CUDA0", "RPC[h:p]/0".
  virtual Device* device() const = 0;          // the device this memory belongs to.
  // Allocates a buffer of `size` bytes; RESOURCE_EXHAUSTED when the memory is not there.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) = 0;
  virtual size_t alignment() const = 0;  // every tensor's data is aligned to this.
  // Largest single allocation. Default: no limit.
  virtual size_t max_size() const { return SIZE_MAX; }
  // Bytes `t` occupies in this memory (a backend may pad). Default: t.NumBytes().
  virtual size_t AllocSize(const Tensor& t) const { return t.NumBytes(); }
  virtual bool is_host() const = 0;  // true when data is addressable by the CPU.
  // Optional: a read-only buffer over `size` bytes of host memory at `data` (aligned to
  // alignment()) that the caller keeps alive, e.g. a mapped model file, so that weights are
  // used where they lie (ggml's buffer_from_host_ptr). Default: UNIMPLEMENTED (the caller
  // allocates and loads).
  virtual absl::StatusOr<std::unique_ptr<Buffer>> FromHostPtr(const void* data, size_t size) {
    return absl::UnimplementedError("buffers over host memory not supported");
  }
};

// Checks r's shape (core/strided_range.h) and that its rows lie inside t and t inside its
// buffer; OUT_OF_RANGE or INVALID_ARGUMENT naming the values otherwise.
absl::Status CheckTensorRange2D(const Tensor& t, const StridedRange& r);
// SetTensor2D/GetTensor2D of buffers whose memory the host addresses (CPU, pinned): the
// checks, then a strided memcpy.
absl::Status HostSetTensor2D(Tensor* t, const void* data, const StridedRange& r);
absl::Status HostGetTensor2D(const Tensor* t, void* data, const StridedRange& r);

// What a buffer is used for (lets a scheduler prefer weight-holding devices).
enum class BufferUsage { kAny, kWeights, kCompute };

// Buffer::LoadTensors's default: CheckTensorLoad, then SetTensor2D from the mapping, per load.
absl::StatusOr<std::vector<LoadStats>> SetTensorLoads(Buffer* buffer, const WeightSource& source,
                                                      absl::Span<const TensorLoad> loads);

// Bytes of a tensor held in one buffer (Buffer::Parts).
struct TensorPart {
  const Buffer* buffer = nullptr;
  size_t bytes = 0;
};

// One allocation on a device; tensors are placed inside it.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual BufferType* type() const = 0;
  virtual void* base() const = 0;  // address of byte 0 (device address space).
  virtual size_t size() const = 0;
  // Per-tensor setup after placement (e.g. padding, views). Default: nothing.
  virtual absl::Status InitTensor(Tensor* t) { return absl::OkStatus(); }
  // Writes/reads `size` bytes at byte `offset` of t's data. Ranges are checked; an empty one
  // does nothing, and its `data` may be null.
  virtual absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) = 0;
  virtual absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) = 0;
  virtual absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) = 0;
  // Writes/reads the rows of r (a view: core/strided_range.h) in one call; ranges are
  // checked. Default: one SetTensor/GetTensor per row.
  virtual absl::Status SetTensor2D(Tensor* t, const void* data, const StridedRange& r) {
    absl::Status s = CheckTensorRange2D(*t, r);
    for (size_t i = 0; s.ok() && i < r.n_rows; ++i) {
      s = SetTensor(t, HostRow(data, r, i), r.offset + i * r.stride, r.row_size);
    }
    return s;
  }
  virtual absl::Status GetTensor2D(const Tensor* t, void* data, const StridedRange& r) {
    absl::Status s = CheckTensorRange2D(*t, r);
    for (size_t i = 0; s.ok() && i < r.n_rows; ++i) {
      s = GetTensor(t, HostRow(data, r, i), r.offset + i * r.stride, r.row_size);
    }
    return s;
  }
  // Copies src (in another buffer, maybe of another device) into dst of this buffer when the
  // backend can do it directly. Default: UNIMPLEMENTED (callers go through host memory).
  virtual absl::Status CopyFrom(const Tensor* src, Tensor* dst) {
    return absl::UnimplementedError("direct copy not supported");
  }
  virtual absl::Status Clear(uint8_t value) = 0;  // fills the whole buffer.
  // Loads weights of tensors in this buffer from a mapped file (core/weight_source.h); returns
  // how they got there, per buffer that holds them. Optional: a buffer on another host may find
  // the bytes there; a meta buffer loads its devices'. Default: SetTensorLoads.
  virtual absl::StatusOr<std::vector<LoadStats>> LoadTensors(const WeightSource& source,
                                                             absl::Span<const TensorLoad> loads) {
    return SetTensorLoads(this, source, loads);
  }
  // Which buffers hold t's bytes and how many each (load reports). Default: all, here; a
  // buffer that spreads tensors over other devices' buffers (meta) names those.
  virtual std::vector<TensorPart> Parts(const Tensor& t) const { return {{this, t.NumBytes()}}; }

  BufferUsage usage() const { return usage_; }
  void set_usage(BufferUsage usage) { usage_ = usage; }

 private:
  BufferUsage usage_ = BufferUsage::kAny;
};

// A Buffer whose type, base and size are fixed when it is made (what most backends' buffers
// are); subclasses implement the data calls.
class BasicBuffer : public Buffer {
 public:
  BufferType* type() const final { return type_; }  // the type that allocated it.
  void* base() const final { return base_; }        // as given to the constructor.
  size_t size() const final { return size_; }       // bytes, as given to the constructor.

 protected:
  // The values the accessors return for the buffer's whole life.
  BasicBuffer(BufferType* type, void* base, size_t size) : type_(type), base_(base), size_(size) {}

 private:
  BufferType* const type_;
  void* const base_;
  const size_t size_;
};

// Places t at byte `offset` of `buffer` (checks alignment and range, then InitTensor).
absl::Status PlaceTensor(Buffer* buffer, Tensor* t, size_t offset);
// Points a view at its base's memory (the base must be placed).
absl::Status PlaceView(Tensor* view);
// Checks that [offset, offset+size) lies inside t and t inside its buffer.
absl::Status CheckTensorRange(const Tensor& t, size_t offset, size_t size);

// Marks a point in a stream's work; another stream (or the host) can wait for it.
class Event {
 public:
  virtual ~Event() = default;
  virtual absl::Status Synchronize() = 0;  // blocks the host until the event has happened.
};

// Where a stream's time went since it was created (for tg-bench's per-row breakdown).
struct StreamStats {
  double compute_us = 0;   // running kernels.
  double transfer_us = 0;  // copies between devices, all-reduce.
  int64_t splits = 0;      // graph pieces run (scheduler splits, per-device subgraphs).
};

// An execution queue on one device (ggml's "backend" instance).
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device* device() const = 0;
  // Asynchronous transfers; defaults are synchronous through the tensor's buffer.
  virtual absl::Status SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size);
  virtual absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size);
  // The 2D forms (core/strided_range.h). Default: synchronous through the buffer's 2D call.
  virtual absl::Status SetTensor2DAsync(Tensor* t, const void* data, const StridedRange& r) {
    return t->buffer == nullptr ? CheckTensorRange2D(*t, r) : t->buffer->SetTensor2D(t, data, r);
  }
  virtual absl::Status GetTensor2DAsync(const Tensor* t, void* data, const StridedRange& r) {
    return t->buffer == nullptr ? CheckTensorRange2D(*t, r) : t->buffer->GetTensor2D(t, data, r);
  }
  // Copies src (any device) into dst (this device) without a host round trip when possible.
  // Default: UNIMPLEMENTED.
  virtual absl::Status CopyTensorAsync(const Tensor* src, Tensor* dst) {
    return absl::UnimplementedError("async copy not supported");
  }
  // Optional: copies src (this stream's device) into dst (`to`'s device) after the work
  // queued here so far, with no one waiting: `to`'s work queued later waits for the bytes,
  // and work queued here later may overwrite src. Default: UNIMPLEMENTED (the caller waits
  // for this stream and copies on `to`).
  virtual absl::Status PushTensorAsync(const Tensor* src, Stream* to, Tensor* dst) {
    return absl::UnimplementedError("push not supported");
  }
  virtual absl::Status Synchronize() = 0;  // waits for all queued work.
  // Runs every node of the graph (all tensors placed in this device's memory). Run-time
  // errors (an index out of range) come back as INVALID_ARGUMENT.
  virtual absl::Status Compute(Graph& graph) = 0;
  // Event support; default UNIMPLEMENTED (the scheduler then synchronizes instead).
  virtual absl::Status RecordEvent(Event* event) {
    return absl::UnimplementedError("events not supported");
  }
  virtual absl::Status WaitEvent(Event* event) {
    return absl::UnimplementedError("events not supported");
  }
  // Optional: work queued between BeginBatch and EndBatch may be held on the host and
  // submitted together (a remote device sends it as one message); anything that waits for
  // it submits it first. Default: nothing is held.
  virtual void BeginBatch() {}
  virtual absl::Status EndBatch() { return absl::OkStatus(); }
  // Optional: reorder/fuse nodes before Compute. Default: leave the graph as it is.
  virtual absl::Status OptimizeGraph(Graph& graph) { return absl::OkStatus(); }
  // Optional: time spent so far. Default: nothing measured.
  virtual StreamStats stats() const { return {}; }
};

// All-reduce among devices of one family (NCCL for CUDA). Destroying it frees it.
class Communicator {
 public:
  virtual ~Communicator() = default;
  // Sums tensors[i] (one per device given to Init, same shape and type) in place.
  virtual absl::Status AllReduce(absl::Span<Tensor* const> tensors) = 0;
  // Optional: true when AllReduce only queues the sum behind each device's queued work and
  // waits for nothing (the devices' streams wait for it), so that a caller may hold the
  // streams' work in a batch (Stream::BeginBatch) across it. Default: it may wait.
  virtual bool QueuesOnly() const { return false; }
};

// Optional per-family collectives (ggml's comm_* proc addresses).
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Init(absl::Span<Device* const> devices) = 0;
};

struct DeviceMemory {
  size_t free = 0;
  size_t total = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual absl::string_view name() const = 0;         // unique: "CPU", "CPU1", "CUDA0", ...
  virtual absl::string_view description() const = 0;  // e.g. the processor's model name.
  virtual DeviceType type() const = 0;
  virtual absl::string_view id() const = 0;  // stable: PCI bus id, endpoint/index, ...
  virtual DeviceMemory memory() const = 0;
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  virtual BufferType* default_buffer_type() = 0;
  // Host memory the device transfers fastest from (pinned). Default: none.
  virtual BufferType* host_buffer_type() { return nullptr; }
  virtual bool SupportsOp(const Tensor& node) const = 0;
  virtual bool SupportsBufferType(const BufferType* type) const = 0;
  // True when an op whose weight lives in host memory is still worth running here (large
  // batches on a GPU). Default: false.
  virtual bool OffloadOp(const Tensor& node) const { return false; }
  // Default: UNIMPLEMENTED (no events).
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() {
    return absl::UnimplementedError("events not supported");
  }
  // Default: nullptr (the meta backend uses its generic all-reduce).
  virtual Collectives* collectives() { return nullptr; }
  // Host threads each new stream of the device runs its kernels on. Default: 0 (none).
  virtual int threads() const { return 0; }
  // Sets threads() for streams created from now on (the tools' -t); n < 1 is taken as 1.
  // Default: UNIMPLEMENTED (the device's kernels do not run on host threads).
  virtual absl::Status SetThreads(int n) {
    return absl::UnimplementedError("the device has no host threads to set");
  }
};

}  // namespace tg

#endif  // TENSORGRID_CORE_BACKEND_H_
