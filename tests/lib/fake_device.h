// FakeDevice: a Device known by its name, type and id only, for tests of code that looks at
// nothing else (the registry, device picking, failover plans). It runs nothing: no stream,
// no memory, no op. Immutable; thread-safe.
#ifndef TENSORGRID_TESTS_LIB_FAKE_DEVICE_H_
#define TENSORGRID_TESTS_LIB_FAKE_DEVICE_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backend.h"

namespace tg::testing {

class FakeDevice : public Device {
 public:
  FakeDevice(std::string name, DeviceType type, std::string id)
      : name_(std::move(name)), type_(type), id_(std::move(id)) {}
  absl::string_view name() const override { return name_; }
  absl::string_view description() const override { return "fake"; }
  DeviceType type() const override { return type_; }
  absl::string_view id() const override { return id_; }
  DeviceMemory memory() const override { return {}; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return absl::UnimplementedError("a fake device runs nothing");
  }
  BufferType* default_buffer_type() override { return nullptr; }
  bool SupportsOp(const Tensor&) const override { return false; }
  bool SupportsBufferType(const BufferType*) const override { return false; }

 private:
  std::string name_;
  DeviceType type_;
  std::string id_;
};

}  // namespace tg::testing

#endif  // TENSORGRID_TESTS_LIB_FAKE_DEVICE_H_
