#include "server/memory_reservation.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace tg::server {

absl::StatusOr<MemoryReservation> MemoryReservation::Reserve(std::atomic<uint64_t>* held,
                                                             uint64_t limit, uint64_t size) {
  uint64_t now = held->load();
  // Compare-and-swap: concurrent reservations never both pass the check against one value.
  for (;;) {
    if (limit != 0 && (size > limit || now > limit - size)) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "session memory limit of %d bytes (--session-mem-limit) exceeded: %d held, %d asked",
          limit, now, size));
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

}  // namespace tg::server
