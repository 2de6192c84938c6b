#include "server/memory_reservation.h"

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace tg::server {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
// The reserve is a tenth of the host: enough on small and mid-sized hosts for the kernel,
// the page cache of the model files and the host's other daemons...
constexpr uint64_t kReserveDivisor = 10;
// ...but never below what a minimal Linux host with sshd needs to stay reachable,
constexpr uint64_t kMinReserve = kGiB;
// ...and not growing without end on big hosts, where those needs stay about the same; on a
// tiny host (a 1 GiB board) at most half of it, so that sessions still get the other half.
constexpr uint64_t kMaxReserve = 8 * kGiB;
constexpr uint64_t kMaxReserveDivisor = 2;
// One session may take half of what sessions may use: the main use is one client placing a
// large model, which wants most of the memory, yet a second tenant still always finds as
// much as the first may take.
constexpr uint64_t kSessionShareDivisor = 2;

std::atomic<uint64_t> host_reserve{0};

// BoundHostHeap: arenas for all threads (the per-thread caches glibc keeps in front of them
// take the contention on small blocks), and glibc's initial mmap threshold, kept fixed.
constexpr int kMaxArenas = 2;
constexpr int kMmapThreshold = 128 << 10;

double GiB(uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

}  // namespace

absl::StatusOr<MemoryReservation> MemoryReservation::Reserve(std::atomic<uint64_t>* held,
                                                             uint64_t limit, uint64_t size) {
  uint64_t now = held->load();
  // Compare-and-swap: concurrent reservations never both pass the check against one value.
  for (;;) {
    if (limit != 0 && (size > limit || now > limit - size)) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "session memory limit of %d bytes (%.1f GiB) exceeded: %d held, %d asked; the "
          "server's --session-mem-limit raises it (0 = no limit)",
          limit, GiB(limit), now, size));
    }
    if (held->compare_exchange_weak(now, now + size)) break;
  }
  return MemoryReservation(held, size);
}

MemoryReservation::MemoryReservation(MemoryReservation&& other) noexcept
    : held_(other.held_), size_(other.size_) {
  other.held_ = nullptr;
}

MemoryReservation::~MemoryReservation() {
  if (held_ != nullptr) *held_ -= size_;
}

void SetHostMemoryReserve(uint64_t bytes) { host_reserve.store(bytes); }

uint64_t HostMemoryReserve() { return host_reserve.load(); }

uint64_t HostMemoryTotal() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
}

uint64_t HostMemoryAvailable() {
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

absl::Status CheckHostMemoryReserve(uint64_t size, uint64_t available, uint64_t reserve) {
  if (reserve == 0 || (available >= reserve && available - reserve >= size)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%d bytes asked would leave less than the host memory reserve of %d bytes (%.1f GiB) "
      "free: %d available; the server's --mem-reserve lowers it (0 = none)",
      size, reserve, GiB(reserve), available));
}

void BoundHostHeap() {
#if defined(__GLIBC__)
  mallopt(M_ARENA_MAX, kMaxArenas);
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
#endif
}

void ReleaseFreedHostMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

uint64_t DefaultHostMemoryReserve(uint64_t host_total) {
  return std::min(std::clamp(host_total / kReserveDivisor, kMinReserve, kMaxReserve),
                  host_total / kMaxReserveDivisor);
}

uint64_t DefaultSessionMemLimit(uint64_t host_total, bool serves_host_memory, uint64_t reserve,
                                uint64_t device_bytes) {
  const uint64_t host_usable =
      serves_host_memory && host_total > reserve ? host_total - reserve : 0;
  // At least one byte: 0 would mean "no limit".
  return std::max<uint64_t>(
      host_usable / kSessionShareDivisor + device_bytes / kSessionShareDivisor, 1);
}

}  // namespace tg::server
