// rpc-server's memory quotas: what one session may hold (MemoryReservation, against
// --session-mem-limit), what all sessions together may hold (ServerMemoryBudget, against
// --mem-budget), and the memory the whole server leaves free (the host reserve,
// --mem-reserve), with the defaults of these flags. "Host memory" here is what this process
// may use: the host's physical memory, or its container's memory limit where that is less
// (core/host_memory.h, whose readings these defaults and checks take).
//
// MemoryReservation: bytes counted against a session's memory limit, its client's
// (--client-mem-limit, server/client_accounts.h) and the server's budget, while an allocation
// is being made. Reserve() adds them to every counter (refusing what would pass any); the
// destructor takes them off again unless Commit() said that a buffer now holds them
// (Session::Free gives committed bytes back). So every failure path after the reservation
// undoes it by returning, with no hand-written rollback.
// Thread-safety: reservations on one counter may be made and dropped from any threads (the
// counters are atomics); a single reservation belongs to one thread. ServerMemoryBudget is
// thread-safe.
#ifndef TENSORGRID_SERVER_MEMORY_RESERVATION_H_
#define TENSORGRID_SERVER_MEMORY_RESERVATION_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/host_memory.h"  // HostMemoryTotal/Available: what these quotas judge.

namespace tg::server {

class ClientAccount;
class Metrics;

// Adds `size` to *held when the sum stays within `limit` (0 = no limit) and returns true;
// false with *held unchanged otherwise. *seen is the value the check was made against (for
// the refusal's message). Compare-and-swap: concurrent adds never both pass against one value.
// Every quota here (session, client, budget) counts through it.
bool AddWithinLimit(std::atomic<uint64_t>* held, uint64_t limit, uint64_t size, uint64_t* seen);

// The server-wide budget: the sum of everything all sessions hold (their MemoryReservations)
// stays within it, so that the server's own memory plus every session's fits in the
// machine (or container) however many sessions share it. Default: the host memory less the
// host reserve (DefaultServerMemoryBudget); --mem-budget sets it.
class ServerMemoryBudget {
 public:
  // `limit` 0 = no budget (tests, the fuzzer). `metrics` (may be null) gets the budget and
  // the bytes held as the gauges tg_mem_budget_bytes and tg_mem_held_bytes.
  explicit ServerMemoryBudget(uint64_t limit, Metrics* metrics = nullptr);
  ServerMemoryBudget(const ServerMemoryBudget&) = delete;
  ServerMemoryBudget& operator=(const ServerMemoryBudget&) = delete;

  // Adds `size` to the bytes held when they stay within the budget; RESOURCE_EXHAUSTED
  // naming the budget, the bytes held, the bytes asked and --mem-budget/--mem-reserve
  // otherwise, with nothing taken.
  absl::Status Take(uint64_t size);
  // Gives back bytes Take took.
  void Give(uint64_t size);

  uint64_t limit() const { return limit_; }
  uint64_t held() const { return held_.load(); }

 private:
  const uint64_t limit_;
  Metrics* const metrics_;
  std::atomic<uint64_t> held_{0};
};

class MemoryReservation {
 public:
  // Adds `size` to *held when the total stays within `limit` (0 = no limit), to `client`'s
  // account and to `budget` (either null = none) when they stay within theirs;
  // RESOURCE_EXHAUSTED naming the limit (the widest that would be passed: the budget's, then
  // the client's, since raising a narrower one would not help), the bytes held and the bytes
  // asked otherwise, with no counter changed. `held`, `budget` and `client` must outlive the
  // reservation.
  static absl::StatusOr<MemoryReservation> Reserve(std::atomic<uint64_t>* held, uint64_t limit,
                                                   uint64_t size,
                                                   ServerMemoryBudget* budget = nullptr,
                                                   ClientAccount* client = nullptr);

  MemoryReservation(MemoryReservation&& other) noexcept;
  // Gives back what this one holds (unless committed), then takes over `other`'s.
  MemoryReservation& operator=(MemoryReservation&& other) noexcept;
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;
  // Gives the bytes back unless committed.
  ~MemoryReservation();

  // The bytes now belong to whatever was allocated: the destructor leaves them counted.
  void Commit() {
    held_ = nullptr;
    budget_ = nullptr;
    client_ = nullptr;
  }
  uint64_t size() const { return size_; }

 private:
  MemoryReservation(std::atomic<uint64_t>* held, ServerMemoryBudget* budget, ClientAccount* client,
                    uint64_t size)
      : held_(held), budget_(budget), client_(client), size_(size) {}
  void Release();  // gives the bytes back unless committed.

  std::atomic<uint64_t>* held_;  // nullptr once committed or moved from.
  ServerMemoryBudget* budget_;   // nullptr once committed or moved from, or without one.
  ClientAccount* client_;        // likewise.
  uint64_t size_;
};

// The host reserve: an allocation of host memory (a buffer whose type is_host) that would
// leave less than this many bytes available on the host is refused, so the operating system
// and the host's other processes keep room whatever the sessions do. One value per process,
// like the memory it guards; 0 (the default, what tests and the fuzzer see) = no reserve.
// Two allocations at the same moment may both pass against the same reading: the reserve is
// a margin, not an exact quota. Thread-safe.
void SetHostMemoryReserve(uint64_t bytes);
uint64_t HostMemoryReserve();

// OK when `size` more bytes leave at least `reserve` of `available` (always for reserve 0);
// RESOURCE_EXHAUSTED naming the reserve, the numbers and --mem-reserve otherwise.
absl::Status CheckHostMemoryReserve(uint64_t size, uint64_t available, uint64_t reserve);

// Hands the heap memory freed so far back to the operating system. glibc keeps freed chunks
// in its per-thread arenas (on a 2-core host, 100 MiB of them after a few hundred sessions
// of a 1 MiB model), where neither the host reserve's MemAvailable nor another process sees
// them; a session that ends calls this so that its memory is really given back.
void ReleaseFreedHostMemory();

// Bounds what the heap keeps between sessions; called first thing in main, before any thread.
// glibc gives each thread that contends for malloc an arena of its own (up to 8 per core)
// and, each time a large mmapped block is freed, raises the size from which blocks are
// mmapped, so later tensor buffers of that size come from those arenas. A soak with faults
// (docs/reliability.md) had 16 arenas holding ~100 MiB for 2 MiB of live objects, the
// resident part growing with the sessions served. Two arenas, and a fixed mmap threshold
// (buffers from 128 KiB up are mmapped and go back to the system when freed), bound it.
void BoundHostHeap();

// The defaults ("auto") of --mem-reserve and --session-mem-limit; docs/reliability.md gives
// the reasons. The reserve: a tenth of the host's memory, within [1 GiB, 8 GiB], at most half
// of it. A session: half of what sessions may use, i.e. half of the host memory above the
// reserve (when a served device keeps its buffers in host memory) plus half of every other
// served device's memory (`device_bytes`, e.g. the GPUs'); never 0, which means no limit.
uint64_t DefaultHostMemoryReserve(uint64_t host_total);
uint64_t DefaultSessionMemLimit(uint64_t host_total, bool serves_host_memory, uint64_t reserve,
                                uint64_t device_bytes);
// The default (auto) of --mem-budget: the host memory above the reserve, when a served
// device keeps its buffers in host memory, plus every other served device's memory; never 0,
// which means no budget.
uint64_t DefaultServerMemoryBudget(uint64_t host_total, bool serves_host_memory, uint64_t reserve,
                                   uint64_t device_bytes);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_MEMORY_RESERVATION_H_
