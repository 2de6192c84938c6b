// MetaDevice: N devices that look like one (tensor parallelism, --split-mode tensor). Every
// tensor placed in its memory is spread over the devices as the SplitFn decides (weights
// sliced, norms mirrored, ...); graphs computed on its stream run as one subgraph per device,
// in parallel, with partial sums all-reduced and slices gathered where an op needs them
// (see graph_partition.h). To the model code it is an ordinary Device: allocate, place,
// Set/GetTensor, CreateStream()->Compute(graph); to the partitioner, a ShadowLookup over its
// buffers. Devices are independent of each other: each has its own address range counter
// and resident generation (meta_buffer.h). Thread-safe.
#ifndef TENSORGRID_META_META_DEVICE_H_
#define TENSORGRID_META_META_DEVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "meta/allreduce.h"
#include "meta/meta_buffer.h"
#include "meta/shadow_lookup.h"
#include "meta/split_state.h"

namespace tg::meta {

struct MetaOptions {
  std::string name;  // default: "META(CPU0,CPU1)".
  AllReduceOptions allreduce;
};

class MetaDevice : public Device, public ShadowLookup {
 public:
  // `split` decides every tensor's state (nullptr: everything mirrored). INVALID_ARGUMENT for
  // no devices, a device listed twice, or a meta device inside a meta device.
  static absl::StatusOr<std::unique_ptr<MetaDevice>> Create(std::vector<Device*> devices,
                                                            SplitFn split,
                                                            MetaOptions options = {});

  absl::string_view name() const override { return name_; }
  absl::string_view description() const override { return description_; }
  // The devices' common type (kAccel when they differ).
  DeviceType type() const override { return type_; }
  absl::string_view id() const override { return id_; }
  DeviceMemory memory() const override;  // the sum over the devices.
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  BufferType* default_buffer_type() override { return buffer_type_.get(); }
  // `buffer` as a meta buffer of this device, or nullptr (a cheap check, no RTTI).
  MetaBuffer* AsOwnBuffer(Buffer* buffer) const {
    return buffer != nullptr && buffer->type() == buffer_type_.get()
               ? static_cast<MetaBuffer*>(buffer)
               : nullptr;
  }
  // A MetaEvent of one event per device, where the devices' work is queued (a stream has
  // found their all-reduce run by their servers: rpc devices); else UNIMPLEMENTED, as when a
  // device has no events. Streams of other devices run each Compute to its end.
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  bool SupportsOp(const Tensor& node) const override;  // every device supports it.
  bool SupportsBufferType(const BufferType* type) const override {
    return type == buffer_type_.get();
  }

  Device* device(int d) const { return devices_[d]; }
  const std::vector<Device*>& devices() const { return devices_; }
  const MetaOptions& options() const { return options_; }

  // ShadowLookup (name() is the Device's).
  int n_devices() const override { return static_cast<int>(devices_.size()); }
  Home HomeOf(const Tensor& t) const override;
  std::optional<ShadowSet> ResidentShadows(const Tensor& t) const override;
  uint64_t ResidentGeneration() const override { return buffer_type_->resident_generation(); }
  // The state of `t` from the SplitFn, checked against t's shape (MIRRORED without one).
  absl::StatusOr<SplitState> DecideSplit(const Tensor& t) const override;
  BufferType* DeviceBufferType(int d) const override { return devices_[d]->default_buffer_type(); }

  // Called by a stream whose Compute only queues the devices' work (MetaStream::Create).
  void set_queues_work() { queues_work_.store(true); }

 private:
  MetaDevice(std::vector<Device*> devices, SplitFn split, MetaOptions options);

  std::vector<Device*> devices_;
  SplitFn split_;
  MetaOptions options_;
  std::string name_;
  std::string description_;
  std::string id_;
  DeviceType type_ = DeviceType::kAccel;
  std::unique_ptr<MetaBufferType> buffer_type_;
  std::atomic<bool> queues_work_{false};
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_META_DEVICE_H_
