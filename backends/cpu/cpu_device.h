// The CPU device family. TG_CPU_DEVICES=N (default 1) exposes N virtual CPU devices that
// split the host's threads, so that multi-device code runs and is tested without GPUs.
// One device is named "CPU"; several are "CPU0".."CPU<N-1>". Thread-safe.
#ifndef TENSORGRID_BACKENDS_CPU_CPU_DEVICE_H_
#define TENSORGRID_BACKENDS_CPU_CPU_DEVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_buffer.h"
#include "core/backend.h"
#include "core/registry.h"

namespace tg::cpu {

class CpuDevice : public Device {
 public:
  CpuDevice(std::string name, std::string id, int n_threads);
  absl::string_view name() const override { return name_; }
  absl::string_view description() const override { return description_; }
  DeviceType type() const override { return DeviceType::kCpu; }
  absl::string_view id() const override { return id_; }
  DeviceMemory memory() const override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType* type) const override { return type->is_host(); }

  int threads() const override { return n_threads_.load(); }
  absl::Status SetThreads(int n) override {
    n_threads_.store(n < 1 ? 1 : n);
    return absl::OkStatus();
  }

 private:
  std::string name_;
  std::string id_;
  std::string description_;
  std::atomic<int> n_threads_;
  CpuBufferType buffer_type_{this};
};

class CpuFamily : public DeviceFamily {
 public:
  // n_devices virtual devices over n_threads_total threads (each gets at least one).
  CpuFamily(int n_devices, int n_threads_total);
  absl::string_view name() const override { return "CPU"; }
  std::vector<Device*> devices() override;

 private:
  std::vector<std::unique_ptr<CpuDevice>> devices_;
};

// Reads TG_CPU_DEVICES (1..64; INVALID_ARGUMENT naming the value otherwise).
absl::StatusOr<int> CpuDeviceCountFromEnv();
// Registers the CPU family with the process registry (once; later calls are no-ops).
absl::Status RegisterCpuFamily();

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_CPU_DEVICE_H_
