#include "backends/vulkan/vk_stream.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/vulkan/vk_buffer.h"
#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_fusion.h"
#include "backends/vulkan/vk_graph_order.h"
#include "backends/vulkan/vk_instance.h"
#include "backends/vulkan/vk_ops.h"
#include "backends/vulkan/vk_recorder.h"
#include "backends/vulkan/vk_transfer.h"
#include "core/status_macros.h"

namespace tg::vulkan {

absl::Status VulkanEvent::Synchronize() {
  if (timeline_ == nullptr || value_ == 0) return absl::OkStatus();
  return timeline_->Wait(value_);
}

absl::StatusOr<std::unique_ptr<VulkanStream>> VulkanStream::Create(VulkanDevice* device) {
  std::unique_ptr<VulkanStream> s(new VulkanStream(device));
  TG_RETURN_IF_ERROR(s->Init());
  return s;
}

absl::Status VulkanStream::Init() {
  TG_ASSIGN_OR_RETURN(timeline_, Timeline::Create(device_));
  device_->AddTimeline(timeline_.get());
  TG_ASSIGN_OR_RETURN(pool_, device_->CreateCommandPool());
  TG_ASSIGN_OR_RETURN(ring_memory_,
                      device_->host_memory().Allocate(StagingRing::kCapacity, kDeviceAlignment));
  ring_ = std::make_unique<StagingRing>(
      ring_memory_, [this](uint64_t value) { return WaitFor(value, /*take_error=*/false); },
      [this] { return open_value(); });
  TG_ASSIGN_OR_RETURN(error_slot_,
                      device_->host_memory().Allocate(sizeof(ErrorSlot), kDeviceAlignment));
  std::memset(error_slot_.mapped(), 0, sizeof(ErrorSlot));
  profiler_ = Profiler::CreateIfEnabled(device_);
  if (absl::StatusOr<Instance*> instance = Instance::Get(); instance.ok()) {
    validation_seen_ = (*instance)->validation_errors();
  }
  return absl::OkStatus();
}

VulkanStream::~VulkanStream() {
  profiler_.reset();  // prints its summary.
  if (timeline_ != nullptr) {
    Flush().IgnoreError();
    timeline_->Wait(timeline_->last_submitted()).IgnoreError();
    device_->RemoveTimeline(timeline_.get());
  }
  if (open_ != VK_NULL_HANDLE) vkEndCommandBuffer(open_);
  if (pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(device_->vk(), pool_, nullptr);
  device_->host_memory().Free(ring_memory_);
  device_->host_memory().Free(error_slot_);
  device_->device_memory().Free(scratch_);
}

Device* VulkanStream::device() const { return device_; }

absl::StatusOr<VkCommandBuffer> VulkanStream::Open() {
  if (open_ != VK_NULL_HANDLE) return open_;
  TG_RETURN_IF_ERROR(device_->CheckLost());
  for (VkCommandBuffer cb : timeline_->TakeRetiredCommandBuffers()) free_cbs_.push_back(cb);
  VkCommandBuffer cb = VK_NULL_HANDLE;
  if (!free_cbs_.empty()) {
    cb = free_cbs_.back();
    free_cbs_.pop_back();
  } else {
    TG_ASSIGN_OR_RETURN(cb, device_->AllocateCommandBuffer(pool_));
  }
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  TG_RETURN_IF_ERROR(device_->Check(vkBeginCommandBuffer(cb, &begin), "vkBeginCommandBuffer"));
  // Earlier submissions on the queue (this stream's and others') come first.
  FullBarrier(cb);
  open_ = cb;
  last_ = Last::kStart;
  return cb;
}

absl::StatusOr<VkCommandBuffer> VulkanStream::OpenForTransfer() {
  TG_ASSIGN_OR_RETURN(VkCommandBuffer cb, Open());
  if (last_ != Last::kStart) FullBarrier(cb);
  last_ = Last::kTransfer;
  return cb;
}

absl::Status VulkanStream::Flush() {
  if (open_ == VK_NULL_HANDLE) return absl::OkStatus();
  VkCommandBuffer cb = open_;
  open_ = VK_NULL_HANDLE;
  FullBarrier(cb);  // results become visible to the host (read-backs, error slot).
  std::vector<Timeline::Completion> done = std::move(open_done_);
  std::vector<SemaphoreWait> waits = std::move(open_waits_);
  std::vector<uint32_t> tags = std::move(open_error_tags_);
  open_done_.clear();
  open_waits_.clear();
  open_error_tags_.clear();
  TG_RETURN_IF_ERROR(device_->Check(vkEndCommandBuffer(cb), "vkEndCommandBuffer"));
  Timeline::Completion completion = [this, done = std::move(done),
                                     tags = std::move(tags)]() -> absl::Status {
    absl::Status first = tags.empty() ? absl::OkStatus() : TakeKernelError(tags);
    for (const Timeline::Completion& step : done) {
      absl::Status s = step();
      if (first.ok()) first = s;
    }
    return first;
  };
  absl::StatusOr<uint64_t> value = timeline_->Submit(cb, waits, std::move(completion));
  if (!value.ok()) {
    free_cbs_.push_back(cb);
    return value.status();
  }
  return absl::OkStatus();
}

absl::Status VulkanStream::TakeKernelError(const std::vector<uint32_t>& tags) {
  auto* slot = reinterpret_cast<volatile ErrorSlot*>(error_slot_.mapped());
  absl::Status status;
  const uint32_t tag = slot->tag;
  if (tag != 0) {
    std::string node = "a node";
    {
      absl::MutexLock lock(&error_names_->mu);
      if (auto it = error_names_->names.find(tag); it != error_names_->names.end()) {
        node = it->second;
      }
    }
    status = absl::InvalidArgumentError(absl::StrCat(device_->name(), ": ", node, ": index ",
                                                     slot->value, " out of range [0, ", slot->limit,
                                                     ")"));
    slot->tag = 0;
  }
  absl::MutexLock lock(&error_names_->mu);
  for (uint32_t t : tags) error_names_->names.erase(t);
  return status;
}

absl::Status VulkanStream::WaitFor(uint64_t value, bool take_error) {
  if (value >= open_value() && open_ != VK_NULL_HANDLE) TG_RETURN_IF_ERROR(Flush());
  if (value > timeline_->last_submitted()) return absl::OkStatus();  // nothing was recorded.
  TG_RETURN_IF_ERROR(timeline_->Wait(value, take_error));
  ring_->Release(timeline_->retired());
  return absl::OkStatus();
}

absl::Status VulkanStream::CheckValidation() {
  absl::StatusOr<Instance*> instance = Instance::Get();
  if (!instance.ok() || !(*instance)->strict_validation()) return absl::OkStatus();
  const int64_t errors = (*instance)->validation_errors();
  if (errors == validation_seen_) return absl::OkStatus();
  const int64_t fresh = errors - validation_seen_;
  validation_seen_ = errors;
  return absl::InternalError(
      absl::StrCat(device_->name(), ": ", fresh, " Vulkan validation error(s), see stderr"));
}

absl::Status VulkanStream::Synchronize() {
  TG_RETURN_IF_ERROR(device_->CheckLost());
  TG_RETURN_IF_ERROR(Flush());
  absl::Status s = timeline_->Wait(timeline_->last_submitted());
  ring_->Release(timeline_->retired());
  TG_RETURN_IF_ERROR(s);
  return CheckValidation();
}

absl::Status VulkanStream::Locate(const Tensor* t, VkBuffer* buffer, uint64_t* offset) const {
  const VulkanBuffer* b = BufferOn(device_, *t);
  if (b == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(device_->name(), ": ", DescribeTensor(*t), " is not in this device's memory"));
  }
  *buffer = b->range().buffer();
  *offset = b->range().offset + b->OffsetOf(t->data);
  return absl::OkStatus();
}

absl::Status VulkanStream::SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  VkBuffer dst;
  uint64_t dst_offset;
  TG_RETURN_IF_ERROR(Locate(t, &dst, &dst_offset));
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t done = 0; done < size;) {
    const size_t n = std::min<size_t>(StagingRing::kMaxChunk, size - done);
    TG_ASSIGN_OR_RETURN(MemoryRange stage, ring_->Reserve(n));
    std::memcpy(stage.mapped(), bytes + done, n);
    TG_ASSIGN_OR_RETURN(VkCommandBuffer cb, OpenForTransfer());
    VkBufferCopy copy{stage.offset, dst_offset + offset + done, n};
    vkCmdCopyBuffer(cb, stage.buffer(), dst, 1, &copy);
    done += n;
  }
  return absl::OkStatus();
}

absl::Status VulkanStream::GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  VkBuffer src;
  uint64_t src_offset;
  TG_RETURN_IF_ERROR(Locate(t, &src, &src_offset));
  auto* out = static_cast<uint8_t*>(data);
  for (size_t done = 0; done < size;) {
    const size_t n = std::min<size_t>(StagingRing::kMaxChunk, size - done);
    TG_ASSIGN_OR_RETURN(MemoryRange stage, ring_->Reserve(n));
    TG_ASSIGN_OR_RETURN(VkCommandBuffer cb, OpenForTransfer());
    VkBufferCopy copy{src_offset + offset + done, stage.offset, n};
    vkCmdCopyBuffer(cb, src, stage.buffer(), 1, &copy);
    uint8_t* from = stage.mapped();
    uint8_t* to = out + done;
    open_done_.push_back([from, to, n]() {
      std::memcpy(to, from, n);
      return absl::OkStatus();
    });
    done += n;
  }
  return absl::OkStatus();
}

absl::Status VulkanStream::CopyTensorAsync(const Tensor* src, Tensor* dst) {
  if (src->buffer == nullptr || dst->buffer == nullptr) {
    return absl::FailedPreconditionError("copy of an unplaced tensor");
  }
  if (BufferOn(device_, *dst) == nullptr) {
    return absl::UnimplementedError("Vulkan: async copies only into this device's memory");
  }
  const size_t n = src->NumBytes();
  if (n != dst->NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(device_->name(), " copy: ", n, " bytes into ", dst->NumBytes()));
  }
  if (BufferOn(device_, *src) != nullptr) {  // this device (device or pinned memory).
    VkBuffer from, to;
    uint64_t from_offset, to_offset;
    TG_RETURN_IF_ERROR(Locate(src, &from, &from_offset));
    TG_RETURN_IF_ERROR(Locate(dst, &to, &to_offset));
    TG_ASSIGN_OR_RETURN(VkCommandBuffer cb, OpenForTransfer());
    VkBufferCopy copy{from_offset, to_offset, n};
    if (n > 0) vkCmdCopyBuffer(cb, from, to, 1, &copy);
    return absl::OkStatus();
  }
  if (src->buffer->type()->is_host()) return SetTensorAsync(dst, src->data, 0, n);
  if (auto* other = dynamic_cast<VulkanBuffer*>(src->buffer); other != nullptr) {
    // Another Vulkan device: its work was waited for (event or sync) by the caller; stage
    // the bytes through the host now.
    std::vector<uint8_t> bounce(n);
    TG_RETURN_IF_ERROR(other->GetTensor(src, bounce.data(), 0, n));
    return SetTensorAsync(dst, bounce.data(), 0, n);
  }
  return absl::UnimplementedError("Vulkan: async copy from this memory not supported");
}

absl::Status VulkanStream::EnsureScratch(uint64_t bytes) {
  if (bytes <= scratch_.size) return absl::OkStatus();
  // Submitted kernels may still use the old scratch.
  TG_RETURN_IF_ERROR(Flush());
  TG_RETURN_IF_ERROR(WaitFor(timeline_->last_submitted(), /*take_error=*/false));
  device_->device_memory().Free(scratch_);
  scratch_ = {};
  // Grow geometrically: prompt batches of rising sizes do not reallocate each time.
  const uint64_t want = std::max<uint64_t>(bytes, scratch_.size * 2);
  TG_ASSIGN_OR_RETURN(scratch_, device_->device_memory().Allocate(want, kDeviceAlignment));
  return absl::OkStatus();
}

absl::Status VulkanStream::OptimizeGraph(Graph& graph) {
  bool placed = true;
  for (const Tensor* n : graph.nodes)
    placed = placed && (n->data != nullptr || n->NumElements() == 0);
  if (!placed) {
    // Before allocation only the dependencies bind: every tensor gets an address range of its
    // own (views share their base's), so that reordering leaves the allocator free to place.
    graph.nodes = OrderForFewerBarriers(graph.nodes, [](const Tensor* t) {
      while (t->view_src != nullptr) t = t->view_src;
      const uint64_t id = reinterpret_cast<uintptr_t>(t);
      return AddressRange{id << 8, (id << 8) + 1};
    });
    return absl::OkStatus();
  }
  Recorder probe(device_, VK_NULL_HANDLE, 0, 0, 0, 0);
  graph.nodes = OrderForFewerBarriers(graph.nodes, [&](const Tensor* t) { return probe.Range(t); });
  return absl::OkStatus();
}

absl::Status VulkanStream::Compute(Graph& graph) {
  TG_RETURN_IF_ERROR(device_->CheckLost());
  uint64_t scratch = 0;
  for (const Tensor* node : graph.nodes) {
    if (IsViewOp(node->op) || node->NumElements() == 0) continue;
    TG_RETURN_IF_ERROR(CheckNodePlacement(*device_, *node));
    scratch = std::max(scratch, NodeScratchBytes(*node));
  }
  TG_RETURN_IF_ERROR(EnsureScratch(2 * scratch));
  Recorder order_probe(device_, VK_NULL_HANDLE, 0, 0, 0, 0);
  const std::vector<Tensor*> order =
      OrderForFewerBarriers(graph.nodes, [&](const Tensor* t) { return order_probe.Range(t); });
  TG_ASSIGN_OR_RETURN(VkCommandBuffer cb, Open());
  if (last_ == Last::kTransfer) FullBarrier(cb);
  last_ = Last::kCompute;
  const uint64_t scratch_address = scratch_.block != nullptr ? scratch_.address() : 0;
  Recorder rec(device_, cb, scratch_address, scratch_.size, error_slot_.address(), next_error_tag_);
  if (profiler_ != nullptr) {
    profiler_->Begin(cb);
    rec.set_profiler(profiler_.get());
  }
  absl::Status status;
  const RangeOf range_of = [&](const Tensor* t) { return rec.Range(t); };
  for (const FusedGroup& g : PlanFusion(order, range_of, FusedProductColumns(*device_))) {
    status = RecordGroup(rec, g);
    if (!status.ok()) break;
  }
  {
    absl::MutexLock lock(&error_names_->mu);
    for (const std::string& name : rec.error_nodes()) {
      open_error_tags_.push_back(next_error_tag_);
      error_names_->names[next_error_tag_++] = name;
    }
  }
  last_barriers_ = rec.barriers();
  last_dispatches_ = rec.dispatches();
  // Even a graph that failed to record goes out: transfers queued before it are kept.
  absl::Status flushed = Flush();
  TG_RETURN_IF_ERROR(status);
  TG_RETURN_IF_ERROR(flushed);
  if (profiler_ == nullptr) return absl::OkStatus();
  TG_RETURN_IF_ERROR(WaitFor(timeline_->last_submitted(), /*take_error=*/false));
  return profiler_->Collect();
}

absl::Status VulkanStream::RecordEvent(Event* event) {
  auto* e = dynamic_cast<VulkanEvent*>(event);
  if (e == nullptr) return absl::InvalidArgumentError("Vulkan: event of another backend");
  TG_RETURN_IF_ERROR(Flush());
  e->Set(timeline_, timeline_->last_submitted());
  return absl::OkStatus();
}

absl::Status VulkanStream::WaitEvent(Event* event) {
  auto* e = dynamic_cast<VulkanEvent*>(event);
  if (e == nullptr) return absl::UnimplementedError("Vulkan: cannot wait for this event");
  if (e->timeline() == nullptr || e->value() == 0) return absl::OkStatus();
  if (e->timeline()->device() != device_) return e->Synchronize();
  if (e->timeline() == timeline_) return absl::OkStatus();  // in order already.
  open_waits_.push_back({e->timeline()->semaphore(), e->value()});
  return absl::OkStatus();
}

}  // namespace tg::vulkan
