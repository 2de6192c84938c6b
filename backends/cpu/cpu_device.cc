#include "backends/cpu/cpu_device.h"

#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "backends/cpu/cpu_stream.h"
#include "core/host_memory.h"

namespace tg::cpu {
namespace {

// Upper bound on TG_CPU_DEVICES: beyond this, virtual devices only make tests slow.
constexpr int kMaxVirtualDevices = 64;

std::string ProcessorModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(absl::string_view(line).substr(colon + 1)));
      }
    }
  }
  return "CPU";
}

}  // namespace

CpuDevice::CpuDevice(std::string name, std::string id, int n_threads)
    : name_(std::move(name)),
      id_(std::move(id)),
      description_(ProcessorModelName()),
      n_threads_(n_threads < 1 ? 1 : n_threads) {}

DeviceMemory CpuDevice::memory() const {
  // What the kernel can still hand out (page cache included) within the container's limit:
  // the same figure an rpc-server's CPU device reports, so a layer split over local and
  // remote CPUs weighs them alike.
  return {HostMemoryAvailable(), HostMemoryTotal()};
}

absl::StatusOr<std::unique_ptr<Stream>> CpuDevice::CreateStream() {
  return std::unique_ptr<Stream>(new CpuStream(this, threads()));
}

bool CpuDevice::SupportsOp(const Tensor& node) const {
  return static_cast<int>(node.op) < static_cast<int>(Op::kCount);
}

CpuFamily::CpuFamily(int n_devices, int n_threads_total) {
  const int per_device = std::max(1, n_threads_total / std::max(1, n_devices));
  for (int i = 0; i < n_devices; ++i) {
    std::string name = n_devices == 1 ? "CPU" : absl::StrCat("CPU", i);
    devices_.push_back(std::make_unique<CpuDevice>(name, absl::StrCat("cpu:", i), per_device));
  }
}

std::vector<Device*> CpuFamily::devices() {
  std::vector<Device*> out;
  for (auto& d : devices_) out.push_back(d.get());
  return out;
}

absl::StatusOr<int> CpuDeviceCountFromEnv() {
  const char* env = std::getenv("TG_CPU_DEVICES");
  if (env == nullptr || *env == '\0') return 1;
  int n = 0;
  if (!absl::SimpleAtoi(env, &n) || n < 1 || n > kMaxVirtualDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("TG_CPU_DEVICES='", env, "' must be a number from 1 to ", kMaxVirtualDevices));
  }
  return n;
}

absl::Status RegisterCpuFamily() {
  static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock lock(&mu);
  if (Registry::Get().HasFamily("CPU")) return absl::OkStatus();
  absl::StatusOr<int> n = CpuDeviceCountFromEnv();
  if (!n.ok()) return n.status();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return Registry::Get().Register(std::make_unique<CpuFamily>(*n, threads));
}

}  // namespace tg::cpu
