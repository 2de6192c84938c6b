// Records one graph's kernels into a command buffer. Each dispatch names the address ranges it
// reads and writes; a barrier goes in only before a dispatch that reads what an earlier one
// wrote, or writes what an earlier one read or wrote, since the last barrier (so independent
// nodes run together). Also hands kernels the stream's scratch memory and run-time error slot.
// Used by one stream's thread.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_RECORDER_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_RECORDER_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace tg::vulkan {

class Profiler;
class VulkanDevice;

// Device addresses [begin, end).
struct AddressRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool Overlaps(const AddressRange& o) const { return begin < o.end && o.begin < end; }
};

// Where a kernel reports a run-time error (an index out of range): the first one wins.
struct ErrorSlot {
  uint32_t tag;   // 0: no error; else the ErrorTag of the node.
  int32_t value;  // the offending index.
  int32_t limit;  // the exclusive upper bound it broke.
  uint32_t spare;
};

class Recorder {
 public:
  Recorder(VulkanDevice* device, VkCommandBuffer cb, uint64_t scratch_address,
           uint64_t scratch_bytes, uint64_t error_address, uint32_t first_error_tag);

  VulkanDevice* device() const { return device_; }
  // The device address of t's first byte (t is placed on this device; checked by the stream).
  uint64_t Address(const Tensor* t) const;
  // The bytes t spans, first to last element.
  AddressRange Range(const Tensor* t) const;

  // Dispatches `groups` workgroups of `shader` (specialization constants `spec`) with push
  // constants `pc`, after a barrier when its reads or writes conflict with earlier work.
  absl::Status Dispatch(absl::string_view shader, absl::Span<const uint32_t> spec, const void* pc,
                        size_t pc_bytes, const uint32_t groups[3],
                        absl::Span<const AddressRange> reads,
                        absl::Span<const AddressRange> writes);
  // The same for a 1-D count of workgroups, spread over x and y when it exceeds the
  // device's x limit (kernels rebuild the index from gl_WorkGroupID.x + y * gl_NumWorkGroups.x).
  absl::Status Dispatch1D(absl::string_view shader, absl::Span<const uint32_t> spec, const void* pc,
                          size_t pc_bytes, uint64_t groups, absl::Span<const AddressRange> reads,
                          absl::Span<const AddressRange> writes);

  // Scratch memory: `bytes` at the given slot (0 or 1), each slot half the scratch.
  absl::StatusOr<AddressRange> Scratch(int slot, uint64_t bytes) const;
  // The activations converted last for a MUL_MAT, by mul_mat_act or ahead by the kernel that
  // wrote them (scratch slot, source range, format), valid until something writes the source
  // or the slot.
  struct ConvertedActivations {
    bool valid = false;
    const Tensor* src = nullptr;
    uint32_t format = 0;
    int slot = 0;
    AddressRange source, converted;
  };
  ConvertedActivations& converted() { return converted_; }

  uint64_t error_address() const { return error_address_; }
  // A tag for `node`'s run-time errors; described(tag) names the node afterwards.
  uint32_t ErrorTag(const Tensor* node);
  const std::vector<std::string>& error_nodes() const { return error_nodes_; }

  // Timestamps around each dispatch (TG_VULKAN_PROFILE=1).
  void set_profiler(Profiler* p) { profiler_ = p; }

  int barriers() const { return barriers_; }
  int dispatches() const { return dispatches_; }

 private:
  VulkanDevice* device_;
  VkCommandBuffer cb_;
  uint64_t scratch_address_;
  uint64_t scratch_bytes_;
  uint64_t error_address_;
  uint32_t first_error_tag_;
  std::vector<std::string> error_nodes_;
  std::vector<AddressRange> written_;  // since the last barrier.
  std::vector<AddressRange> read_;
  ConvertedActivations converted_;
  VkPipeline bound_ = VK_NULL_HANDLE;
  Profiler* profiler_ = nullptr;
  int barriers_ = 0;
  int dispatches_ = 0;
};

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_RECORDER_H_
