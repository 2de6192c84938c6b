// A graph built once and run repeatedly on one device: the GPU tests build the same graph
// for CUDA and for the CPU, give both the same inputs and compare the outputs (the CPU is
// the reference). Header-only test support. Not thread-safe.
#ifndef TENSORGRID_TESTS_GPU_DEVICE_RUN_H_
#define TENSORGRID_TESTS_GPU_DEVICE_RUN_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "core/quants.h"
#include "core/status_macros.h"

namespace tg::testing {

class DeviceRun {
 public:
  // Builds the graph: returns its outputs and appends its leafs (the inputs) to *leafs.
  using Builder = std::function<std::vector<Tensor*>(Context& ctx, std::vector<Tensor*>* leafs)>;

  static absl::StatusOr<std::unique_ptr<DeviceRun>> Create(Device* device, const Builder& build) {
    std::unique_ptr<DeviceRun> r(new DeviceRun(device));
    r->outputs_ = build(r->ctx_, &r->leafs_);
    for (Tensor* t : r->leafs_) t->flags |= kFlagInput;
    TG_ASSIGN_OR_RETURN(r->graph_, BuildGraph(r->outputs_));
    TG_ASSIGN_OR_RETURN(r->stream_, device->CreateStream());
    TG_RETURN_IF_ERROR(r->Reallocate());
    return r;
  }

  // Places the graph in a new buffer (every tensor moves; the leafs must be set again).
  absl::Status Reallocate() {
    for (Tensor* t : leafs_) t->data = nullptr, t->buffer = nullptr;
    for (Tensor* t : graph_.nodes) t->data = nullptr, t->buffer = nullptr;
    // The old buffer lives until the new one exists: the addresses really change.
    std::unique_ptr<GraphAllocator> old = std::move(allocator_);
    allocator_ = std::make_unique<GraphAllocator>(device_->default_buffer_type());
    return allocator_->Allocate(graph_);
  }

  // Leaf i's values, converted to its type.
  absl::Status Set(int i, const std::vector<float>& values) {
    Tensor* t = leafs_[i];
    std::vector<uint8_t> bytes(t->NumBytes());
    QuantizeRow(t->type, values.data(), bytes.data(), t->NumElements());
    return t->buffer->SetTensor(t, bytes.data(), 0, bytes.size());
  }
  absl::Status SetBytes(int i, size_t offset, const std::vector<uint8_t>& bytes) {
    Tensor* t = leafs_[i];
    return t->buffer->SetTensor(t, bytes.data(), offset, bytes.size());
  }

  absl::Status Compute() {
    TG_RETURN_IF_ERROR(stream_->Compute(graph_));
    return stream_->Synchronize();
  }

  // Output i (F32, contiguous) as read back from the device.
  absl::StatusOr<std::vector<float>> Read(int i) const {
    const Tensor* t = outputs_[i];
    std::vector<float> out(t->NumElements());
    TG_RETURN_IF_ERROR(t->buffer->GetTensor(t, out.data(), 0, out.size() * sizeof(float)));
    return out;
  }

  Stream* stream() const { return stream_.get(); }
  Graph& graph() { return graph_; }
  Tensor* leaf(int i) const { return leafs_[i]; }
  Tensor* output(int i) const { return outputs_[i]; }

 private:
  explicit DeviceRun(Device* device) : device_(device) {}

  Device* device_;
  Context ctx_;
  std::vector<Tensor*> leafs_, outputs_;
  Graph graph_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<GraphAllocator> allocator_;
};

}  // namespace tg::testing

#endif  // TENSORGRID_TESTS_GPU_DEVICE_RUN_H_
