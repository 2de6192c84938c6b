#include "core/scheduler_assign.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tg {
namespace {

bool IsWeight(const Tensor& t) {
  return t.HasFlag(kFlagWeight) ||
         (t.buffer != nullptr && t.buffer->usage() == BufferUsage::kWeights);
}

std::string DeviceNames(absl::Span<Device* const> devices) {
  return absl::StrJoin(devices, ", ",
                       [](std::string* out, const Device* d) { absl::StrAppend(out, d->name()); });
}

class Assigner {
 public:
  Assigner(const Graph& graph, absl::Span<Device* const> devices)
      : graph_(graph), devices_(devices), lowest_(static_cast<int>(devices.size()) - 1) {}

  absl::StatusOr<DeviceAssignment> Run() {
    TG_RETURN_IF_ERROR(PinToMemory());
    ExpandDown(/*skip_lowest=*/true);
    ExpandUp(/*skip_lowest=*/true);
    ExpandDown(/*skip_lowest=*/false);
    ExpandUp(/*skip_lowest=*/false);
    TG_RETURN_IF_ERROR(UpgradeAndFill());
    AssignViewsAndInputs();
    TG_RETURN_IF_ERROR(Verify());
    return std::move(a_);
  }

 private:
  // The device whose memory `buffer` is: its own device when scheduled, else the
  // highest-priority device that can use that memory.
  absl::StatusOr<int> DeviceOfBuffer(const Buffer* buffer, const Tensor& t) const {
    const BufferType* type = buffer->type();
    for (int i = 0; i < static_cast<int>(devices_.size()); ++i) {
      if (devices_[i] == type->device()) return i;
    }
    for (int i = 0; i < static_cast<int>(devices_.size()); ++i) {
      if (devices_[i]->SupportsBufferType(type)) return i;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("scheduler: ", DescribeTensor(t), " lives in ", type->name(),
                     " memory, which none of the devices (", DeviceNames(devices_), ") can use"));
  }

  bool Supports(int d, const Tensor& node) const { return devices_[d]->SupportsOp(node); }

  // The memory type t has or will have (nullptr while unknown).
  const BufferType* MemoryType(const Tensor* t) const {
    const Tensor* owner = MemoryOwner(t);
    if (owner->buffer != nullptr) return owner->buffer->type();
    const int d = a_.Get(owner);
    return d < 0 ? nullptr : devices_[d]->default_buffer_type();
  }

  // Pass 1.
  absl::Status PinToMemory() {
    for (const Tensor* leaf : graph_.leafs) {
      const Tensor* owner = MemoryOwner(leaf);
      if (owner->buffer == nullptr) continue;
      TG_ASSIGN_OR_RETURN(int d, DeviceOfBuffer(owner->buffer, *leaf));
      a_.Set(leaf, d);
    }
    for (const Tensor* node : graph_.nodes) {
      TG_ASSIGN_OR_RETURN(int d, PinnedDevice(*node));
      if (d >= 0) a_.Set(node, d);
    }
    return absl::OkStatus();
  }

  // Where memory or weights pin `node` (-1: nowhere).
  absl::StatusOr<int> PinnedDevice(const Tensor& node) const {
    const Tensor* owner = MemoryOwner(&node);
    if (owner->buffer != nullptr) {
      TG_ASSIGN_OR_RETURN(int d, DeviceOfBuffer(owner->buffer, node));
      // A view costs nothing anywhere; a writing node needs a device that runs its op.
      if (IsViewOp(node.op) || Supports(d, node)) return d;
      return -1;
    }
    int best = -1;
    size_t best_bytes = 0;
    for (const Tensor* src : node.src) {
      if (src == nullptr) continue;
      const Tensor* w = MemoryOwner(src);
      if (w->buffer == nullptr || !IsWeight(*w) || src->NumBytes() <= best_bytes) continue;
      TG_ASSIGN_OR_RETURN(int d, DeviceOfBuffer(w->buffer, *src));
      const int off = OffloadTarget(node, *w->buffer->type(), d);
      if (off >= 0) d = off;
      if (!Supports(d, node)) continue;  // another device may read it, or get a copy.
      best = d;
      best_bytes = src->NumBytes();
    }
    return best;
  }

  // ggml's op offload: a node whose weight lives in host memory on device `d` runs on the
  // first higher-priority device that supports it and asks for it (Device::OffloadOp: a
  // GPU for a large batch, where moving the weight costs less than computing on the host);
  // the split copies the weight there. -1 when none does. Unlike ggml, which only offloads
  // from the last device (assumed the CPU), any device holding host memory may be offloaded
  // from: several virtual CPU devices are common here.
  int OffloadTarget(const Tensor& node, const BufferType& weight_memory, int d) const {
    if (!weight_memory.is_host()) return -1;
    for (int b = 0; b < d; ++b) {
      if (Supports(b, node) && devices_[b]->OffloadOp(node)) return b;
    }
    return -1;
  }

  // Pass 2: an unassigned node takes the device of the last assigned node before it.
  // With skip_lowest, the lowest-priority device does not spread (ggml: GPUs first).
  void ExpandDown(bool skip_lowest) {
    int cur = -1;
    for (const Tensor* node : graph_.nodes) Expand(node, skip_lowest, &cur);
  }
  void ExpandUp(bool skip_lowest) {
    int cur = -1;
    for (auto it = graph_.nodes.rbegin(); it != graph_.nodes.rend(); ++it) {
      Expand(*it, skip_lowest, &cur);
    }
  }
  void Expand(const Tensor* node, bool skip_lowest, int* cur) {
    if (IsViewOp(node->op)) return;  // views follow their base (pass 4).
    const int d = a_.Get(node);
    if (d >= 0) {
      *cur = skip_lowest && d == lowest_ ? -1 : d;
    } else if (*cur >= 0 && Supports(*cur, *node)) {
      a_.Set(node, *cur);
    }
  }

  // Pass 3.
  absl::Status UpgradeAndFill() {
    for (const Tensor* node : graph_.nodes) {
      if (IsViewOp(node->op)) continue;
      const int d = a_.Get(node);
      if (d < 0) {
        TG_ASSIGN_OR_RETURN(int best, MostCompatible(*node));
        a_.Set(node, best);
        continue;
      }
      for (int b = 0; b < d; ++b) {
        // The node's result lands in b's default memory: the same type as d's keeps every
        // consumer able to read it (ggml's rule: e.g. a BLAS device beside the CPU).
        if (devices_[b]->default_buffer_type() != devices_[d]->default_buffer_type()) continue;
        if (Supports(b, *node) && CanReadInputs(b, *node)) {
          a_.Set(node, b);
          break;
        }
      }
    }
    return absl::OkStatus();
  }

  // Graph inputs have no memory yet (pass 4 puts them where they are first read): they do not
  // hold a node back.
  bool CanReadInputs(int d, const Tensor& node) const {
    for (const Tensor* src : node.src) {
      const BufferType* type = src == nullptr ? nullptr : MemoryType(src);
      if (type != nullptr && !devices_[d]->SupportsBufferType(type)) return false;
    }
    return true;
  }

  // A device for a node no pass could place: supports the op, reads most of its inputs.
  absl::StatusOr<int> MostCompatible(const Tensor& node) const {
    int best = -1;
    int best_count = -1;
    for (int d = 0; d < static_cast<int>(devices_.size()); ++d) {
      if (!Supports(d, node)) continue;
      int count = 0;
      for (const Tensor* src : node.src) {
        const BufferType* type = src == nullptr ? nullptr : MemoryType(src);
        if (type != nullptr && devices_[d]->SupportsBufferType(type)) ++count;
      }
      if (count > best_count) {
        best = d;
        best_count = count;
      }
    }
    if (best < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler: no device supports ", OpName(node.op), " node ",
                       DescribeTensor(node), " (devices: ", DeviceNames(devices_), ")"));
    }
    return best;
  }

  // Pass 4: graph inputs (leafs without memory) go where they are first read; views go with
  // their base.
  void AssignViewsAndInputs() {
    for (const Tensor* node : graph_.nodes) {
      if (IsViewOp(node->op)) continue;
      for (const Tensor* src : node->src) {
        if (src == nullptr) continue;
        const Tensor* owner = MemoryOwner(src);
        if (owner->op == Op::kNone && a_.Get(owner) < 0) a_.Set(owner, a_.Get(node));
      }
    }
    for (const Tensor* leaf : graph_.leafs) {
      if (a_.Get(leaf) < 0) a_.Set(leaf, 0);  // read by no computed node (only by views).
    }
    for (const Tensor* node : graph_.nodes) {
      if (!IsViewOp(node->op)) continue;
      const Tensor* base = node->view_src != nullptr ? node->view_src : node->src[0];
      const int d = base == nullptr ? -1 : a_.Get(base);
      a_.Set(node, d >= 0 ? d : 0);
    }
  }

  absl::Status Verify() const {
    for (const Tensor* node : graph_.nodes) {
      if (IsViewOp(node->op)) continue;
      const int d = a_.Get(node);
      if (!Supports(d, *node)) {
        return absl::InvalidArgumentError(absl::StrCat("scheduler: ", devices_[d]->name(),
                                                       " does not support ", OpName(node->op),
                                                       " node ", DescribeTensor(*node)));
      }
      // A node writing into memory elsewhere (SET_ROWS into a cache) must reach it.
      const BufferType* own = node->view_src != nullptr ? MemoryType(node) : nullptr;
      if (own != nullptr && !devices_[d]->SupportsBufferType(own)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "scheduler: ", OpName(node->op), " node ", DescribeTensor(*node), " writes into ",
            own->name(), " memory, which ", devices_[d]->name(), " cannot use"));
      }
    }
    return absl::OkStatus();
  }

  const Graph& graph_;
  absl::Span<Device* const> devices_;
  const int lowest_;
  DeviceAssignment a_;
};

}  // namespace

absl::StatusOr<DeviceAssignment> AssignDevices(const Graph& graph,
                                               absl::Span<Device* const> devices) {
  if (devices.empty()) return absl::InvalidArgumentError("scheduler: no devices");
  return Assigner(graph, devices).Run();
}

}  // namespace tg
