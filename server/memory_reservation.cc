#include "server/memory_reservation.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "server/client_accounts.h"
#include "server/metrics.h"

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

// "512.0 KiB", "1.1 MiB", "2.00 GiB": budgets range from tests' kilobytes to GPU hosts'.
std::string Human(uint64_t bytes) {
  if (bytes >= kGiB) return absl::StrFormat("%.2f GiB", GiB(bytes));
  if (bytes >= (1 << 20)) {
    return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  }
  if (bytes >= 1024) return absl::StrFormat("%.1f KiB", static_cast<double>(bytes) / 1024);
  return "under 1 KiB";
}

// The host memory sessions may use: what is above the reserve, when a served device keeps
// its buffers in host memory; none otherwise.
uint64_t UsableHostMemory(uint64_t host_total, bool serves_host_memory, uint64_t reserve) {
  return serves_host_memory && host_total > reserve ? host_total - reserve : 0;
}

}  // namespace

bool AddWithinLimit(std::atomic<uint64_t>* held, uint64_t limit, uint64_t size, uint64_t* seen) {
  uint64_t now = held->load();
  for (;;) {
    if (limit != 0 && (size > limit || now > limit - size)) {
      *seen = now;
      return false;
    }
    if (held->compare_exchange_weak(now, now + size)) return true;
  }
}

ServerMemoryBudget::ServerMemoryBudget(uint64_t limit, Metrics* metrics)
    : limit_(limit), metrics_(metrics) {
  if (metrics_ != nullptr) metrics_->SetMemBudget(limit_);
}

absl::Status ServerMemoryBudget::Take(uint64_t size) {
  if (uint64_t now; !AddWithinLimit(&held_, limit_, size, &now)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "server memory budget of %d bytes (%s) exceeded: all sessions hold %d bytes, %d "
        "asked; the server's --mem-budget sets it (default: its memory, or its container's "
        "limit, less --mem-reserve)",
        limit_, Human(limit_), now, size));
  }
  if (metrics_ != nullptr) metrics_->MemHeldChanged(static_cast<double>(size));
  return absl::OkStatus();
}

void ServerMemoryBudget::Give(uint64_t size) {
  held_ -= size;
  if (metrics_ != nullptr) metrics_->MemHeldChanged(-static_cast<double>(size));
}

absl::StatusOr<MemoryReservation> MemoryReservation::Reserve(std::atomic<uint64_t>* held,
                                                             uint64_t limit, uint64_t size,
                                                             ServerMemoryBudget* budget,
                                                             ClientAccount* client) {
  // The widest first: when several would be passed, it is the one to name.
  if (budget != nullptr) TG_RETURN_IF_ERROR(budget->Take(size));
  if (client != nullptr) {
    if (absl::Status taken = client->Take(size); !taken.ok()) {
      if (budget != nullptr) budget->Give(size);
      return taken;
    }
  }
  if (uint64_t now; !AddWithinLimit(held, limit, size, &now)) {
    if (budget != nullptr) budget->Give(size);
    if (client != nullptr) client->Give(size);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "session memory limit of %d bytes (%.1f GiB) exceeded: %d held, %d asked; the "
        "server's --session-mem-limit raises it (0 = no limit)",
        limit, GiB(limit), now, size));
  }
  return MemoryReservation(held, budget, client, size);
}

MemoryReservation::MemoryReservation(MemoryReservation&& other) noexcept
    : held_(other.held_), budget_(other.budget_), client_(other.client_), size_(other.size_) {
  other.held_ = nullptr;
  other.budget_ = nullptr;
  other.client_ = nullptr;
}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& other) noexcept {
  if (this != &other) {
    Release();
    held_ = other.held_;
    budget_ = other.budget_;
    client_ = other.client_;
    size_ = other.size_;
    other.held_ = nullptr;
    other.budget_ = nullptr;
    other.client_ = nullptr;
  }
  return *this;
}

MemoryReservation::~MemoryReservation() { Release(); }

void MemoryReservation::Release() {
  if (held_ != nullptr) *held_ -= size_;
  if (budget_ != nullptr) budget_->Give(size_);
  if (client_ != nullptr) client_->Give(size_);
  held_ = nullptr;
  budget_ = nullptr;
  client_ = nullptr;
}

void SetHostMemoryReserve(uint64_t bytes) { host_reserve.store(bytes); }

uint64_t HostMemoryReserve() { return host_reserve.load(); }

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
  const uint64_t host_usable = UsableHostMemory(host_total, serves_host_memory, reserve);
  // At least one byte: 0 would mean "no limit".
  return std::max<uint64_t>(
      host_usable / kSessionShareDivisor + device_bytes / kSessionShareDivisor, 1);
}

uint64_t DefaultServerMemoryBudget(uint64_t host_total, bool serves_host_memory, uint64_t reserve,
                                   uint64_t device_bytes) {
  const uint64_t host_usable = UsableHostMemory(host_total, serves_host_memory, reserve);
  return std::max<uint64_t>(host_usable + device_bytes, 1);  // 0 would mean "no budget".
}

}  // namespace tg::server
