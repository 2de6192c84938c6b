// MemoryReservation: bytes counted against a session's memory limit while an allocation is
// being made. Reserve() adds them to the session's counter (refusing what would pass the
// limit); the destructor takes them off again unless Commit() said that a buffer now holds
// them (Session::Free gives committed bytes back). So every failure path after the
// reservation undoes it by returning, with no hand-written rollback.
// Thread-safety: reservations on one counter may be made and dropped from any threads (the
// counter is one atomic); a single reservation belongs to one thread.
#ifndef TENSORGRID_SERVER_MEMORY_RESERVATION_H_
#define TENSORGRID_SERVER_MEMORY_RESERVATION_H_

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"

namespace tg::server {

class MemoryReservation {
 public:
  // Adds `size` to *held when the total stays within `limit` (0 = no limit);
  // RESOURCE_EXHAUSTED naming the limit, the bytes held and the bytes asked otherwise, with
  // *held unchanged. `held` must outlive the reservation.
  static absl::StatusOr<MemoryReservation> Reserve(std::atomic<uint64_t>* held, uint64_t limit,
                                                   uint64_t size);

  MemoryReservation(MemoryReservation&& other) noexcept;
  MemoryReservation& operator=(MemoryReservation&&) = delete;
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;
  // Gives the bytes back unless committed.
  ~MemoryReservation();

  // The bytes now belong to whatever was allocated: the destructor leaves them counted.
  void Commit() { held_ = nullptr; }
  uint64_t size() const { return size_; }

 private:
  MemoryReservation(std::atomic<uint64_t>* held, uint64_t size) : held_(held), size_(size) {}

  std::atomic<uint64_t>* held_;  // nullptr once committed or moved from.
  uint64_t size_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_MEMORY_RESERVATION_H_
