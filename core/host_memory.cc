#include "core/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/container_memory.h"

namespace tg {

uint64_t PhysicalMemoryTotal() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
}

bool TransparentHugePagesUsable() {
  static const bool usable = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;  // e.g. "always [madvise] never".
    return static_cast<bool>(std::getline(f, modes)) && modes.find("[never]") == std::string::npos;
  }();
  return usable;
}

uint64_t PhysicalMemoryAvailable() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::string value;
  std::string unit;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    uint64_t kib = 0;
    if (key == "MemAvailable:" && absl::SimpleAtoi(value, &kib)) return kib * 1024;
  }
  return static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
}

namespace {

// One reading of MemAvailable and the container, shared by the calls of the next
// kReadingTtl: each file costs 25..45 us to read on a small VM, and a reading is 5..8 files,
// so a server session allocating thousands of small buffers spent 0.5 ms in each. A reading
// that old only moves the server's host reserve margin (which was never exact); its budget,
// what bounds the sessions, is exact.
constexpr absl::Duration kReadingTtl = absl::Milliseconds(10);

struct Reading {
  uint64_t physical_available = 0;
  ContainerMemory container;
};

Reading CurrentReading() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::Time at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  static Reading* reading ABSL_GUARDED_BY(mu) = new Reading;
  absl::MutexLock lock(&mu);
  const absl::Time now = absl::Now();
  if (now - at >= kReadingTtl) {
    reading->physical_available = PhysicalMemoryAvailable();
    reading->container = ContainerMemoryReader::Process().Read();
    at = now;
  }
  return *reading;
}

}  // namespace

uint64_t HostMemoryTotal() {
  const uint64_t physical = PhysicalMemoryTotal();
  const ContainerMemory container = CurrentReading().container;
  return container.limit != 0 ? std::min(physical, container.limit) : physical;
}

uint64_t HostMemoryAvailable() {
  const Reading r = CurrentReading();
  return r.container.limit != 0 ? std::min(r.physical_available, r.container.available)
                                : r.physical_available;
}

}  // namespace tg
