#include "meta/meta_device.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "meta/meta_event.h"
#include "meta/meta_stream.h"

namespace tg::meta {

absl::StatusOr<std::unique_ptr<MetaDevice>> MetaDevice::Create(std::vector<Device*> devices,
                                                               SplitFn split, MetaOptions options) {
  if (devices.empty()) return absl::InvalidArgumentError("a meta device needs devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] == nullptr) return absl::InvalidArgumentError("null device");
    if (dynamic_cast<MetaDevice*>(devices[i]) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("a meta device cannot contain meta device ", devices[i]->name()));
    }
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", devices[i]->name(), " is listed twice"));
      }
    }
  }
  return std::unique_ptr<MetaDevice>(
      new MetaDevice(std::move(devices), std::move(split), std::move(options)));
}

MetaDevice::MetaDevice(std::vector<Device*> devices, SplitFn split, MetaOptions options)
    : devices_(std::move(devices)), split_(std::move(split)), options_(std::move(options)) {
  std::vector<std::string> names;
  std::vector<std::string> ids;
  type_ = devices_[0]->type();
  for (Device* d : devices_) {
    names.emplace_back(d->name());
    ids.emplace_back(d->id());
    if (d->type() != type_) type_ = DeviceType::kAccel;
  }
  name_ =
      options_.name.empty() ? absl::StrCat("META(", absl::StrJoin(names, ","), ")") : options_.name;
  description_ = absl::StrCat("tensor parallel over ", absl::StrJoin(names, ", "));
  id_ = absl::StrCat("meta:", absl::StrJoin(ids, ","));
  buffer_type_ = std::make_unique<MetaBufferType>(this);
}

DeviceMemory MetaDevice::memory() const {
  DeviceMemory total;
  for (Device* d : devices_) {
    const DeviceMemory m = d->memory();
    total.free += m.free;
    total.total += m.total;
  }
  return total;
}

absl::StatusOr<std::unique_ptr<Stream>> MetaDevice::CreateStream() {
  TG_ASSIGN_OR_RETURN(std::unique_ptr<MetaStream> stream, MetaStream::Create(this));
  return std::unique_ptr<Stream>(std::move(stream));
}

absl::StatusOr<std::unique_ptr<Event>> MetaDevice::CreateEvent() {
  if (!queues_work_.load()) {
    return absl::UnimplementedError(
        absl::StrCat(name_,
                     " runs each Compute to its end: its devices' all-reduce is not "
                     "queued on their servers"));
  }
  std::vector<std::unique_ptr<Event>> events;
  for (Device* d : devices_) {
    TG_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, d->CreateEvent());
    events.push_back(std::move(e));
  }
  return std::unique_ptr<Event>(new MetaEvent(std::move(events)));
}

bool MetaDevice::SupportsOp(const Tensor& node) const {
  for (Device* d : devices_) {
    if (!d->SupportsOp(node)) return false;
  }
  return true;
}

ShadowLookup::Home MetaDevice::HomeOf(const Tensor& t) const {
  const MetaBuffer* mb = AsOwnBuffer(t.buffer);
  if (mb == nullptr) return Home::kElsewhere;
  return mb->holds_graph_tensors() ? Home::kGraph : Home::kResident;
}

std::optional<ShadowSet> MetaDevice::ResidentShadows(const Tensor& t) const {
  const MetaBuffer* mb = AsOwnBuffer(t.buffer);
  if (mb == nullptr || mb->holds_graph_tensors()) return std::nullopt;
  return mb->Shadows(&t);
}

absl::StatusOr<SplitState> MetaDevice::DecideSplit(const Tensor& t) const {
  if (!split_) return SplitState::Mirrored();
  TG_ASSIGN_OR_RETURN(SplitState state, split_(t));
  TG_RETURN_IF_ERROR(state.Validate(t, n_devices()));
  return state;
}

}  // namespace tg::meta
