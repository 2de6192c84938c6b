#include "core/registry.h"

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tg {

Registry& Registry::Get() {
  static Registry* registry = new Registry();  // never destroyed: devices outlive statics.
  return *registry;
}

absl::Status Registry::Register(std::unique_ptr<DeviceFamily> family) {
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) {
    if (f->name() == family->name()) {
      return absl::AlreadyExistsError(
          absl::StrCat("device family ", family->name(), " is already registered"));
    }
    for (Device* existing : f->devices()) {
      for (Device* d : family->devices()) {
        if (absl::EqualsIgnoreCase(existing->name(), d->name())) {
          return absl::AlreadyExistsError(absl::StrCat("device name ", d->name(), " is taken"));
        }
      }
    }
  }
  families_.push_back(std::move(family));
  return absl::OkStatus();
}

bool Registry::HasFamily(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) {
    if (f->name() == name) return true;
  }
  return false;
}

std::vector<std::pair<Device*, bool>> Registry::AllDevices() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<Device*, bool>> out;
  std::vector<absl::string_view> earlier_ids;  // ids of the families before the current one.
  for (const auto& f : families_) {
    const std::vector<Device*> family_devices = f->devices();
    for (Device* d : family_devices) {
      const bool duplicate = !d->id().empty() && absl::c_linear_search(earlier_ids, d->id());
      out.emplace_back(d, duplicate);
    }
    for (Device* d : family_devices) earlier_ids.push_back(d->id());
  }
  return out;
}

std::vector<Device*> Registry::devices() const {
  std::vector<Device*> out;
  for (const auto& [d, duplicate] : AllDevices()) {
    if (!duplicate) out.push_back(d);
  }
  return out;
}

absl::StatusOr<Device*> Registry::FindDevice(absl::string_view name) const {
  const std::vector<std::pair<Device*, bool>> all = AllDevices();
  for (const auto& [d, duplicate] : all) {
    if (absl::EqualsIgnoreCase(d->name(), name)) return d;
  }
  std::vector<std::string> names;
  for (const auto& [d, duplicate] : all) names.emplace_back(d->name());
  return absl::NotFoundError(
      absl::StrCat("no device named '", name, "' (devices: ", absl::StrJoin(names, ", "), ")"));
}

std::vector<Device*> Registry::DefaultDevices() const {
  std::vector<Device*> gpus, igpus;
  for (Device* d : devices()) {
    if (d->type() == DeviceType::kGpu || d->type() == DeviceType::kRemote) gpus.push_back(d);
    if (d->type() == DeviceType::kIgpu) igpus.push_back(d);
  }
  if (!gpus.empty()) return gpus;
  if (!igpus.empty()) return igpus;
  if (Device* cpu = CpuDevice(); cpu != nullptr) return {cpu};
  return {};
}

Device* Registry::CpuDevice() const {
  for (Device* d : devices()) {
    if (d->type() == DeviceType::kCpu) return d;
  }
  return nullptr;
}

}  // namespace tg
