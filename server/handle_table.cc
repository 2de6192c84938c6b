#include "server/handle_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/client_accounts.h"
#include "server/random_id.h"

namespace tg::server {
namespace {

absl::Status NoBuffer(uint64_t handle) {
  return absl::NotFoundError(absl::StrFormat("no buffer with handle %#x in this session", handle));
}

}  // namespace

uint64_t BufferCharge(uint64_t size) { return std::max(size, kMinBufferCharge); }

HandleTable::HandleTable(const Limits& limits)
    : limits_(limits),
      handle_key_(limits.predictable_handles ? 0 : RandomU64()),
      handle_mult_(limits.predictable_handles ? 1 : RandomU64() | 1) {}

HandleTable::~HandleTable() { Clear(); }

absl::StatusOr<MemoryReservation> HandleTable::ReserveMemory(uint64_t size) {
  return MemoryReservation::Reserve(&bytes_held_, limits_.mem_limit, size, limits_.budget,
                                    limits_.client);
}

void HandleTable::ReleaseMemory(uint64_t size) {
  bytes_held_ -= size;
  if (limits_.budget != nullptr) limits_.budget->Give(size);
  if (limits_.client != nullptr) limits_.client->Give(size);
}

absl::StatusOr<MemoryReservation> HandleTable::ReserveBuffer(uint64_t size) {
  if (const uint64_t cap = limits_.max_buffers, held = buffer_count(); cap != 0 && held >= cap) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this session holds %d buffers, the most one session may hold; free some, or raise "
        "the server's --max-buffers-per-session (%d)",
        held, cap));
  }
  // Tiny buffers are charged their bookkeeping.
  return ReserveMemory(BufferCharge(size));
}

uint64_t HandleTable::NextHandle() {
  // A bijection of a counter keyed per session: unique, opaque, never an address.
  for (;;) {
    uint64_t x = (next_handle_++ ^ handle_key_) * handle_mult_;
    x ^= x >> 29;
    if (x != 0 && !buffers_.contains(x)) return x;
  }
}

uint64_t HandleTable::Insert(std::shared_ptr<SessionBuffer> buffer, MemoryReservation charge) {
  charge.Commit();  // Remove or Clear gives the bytes back.
  absl::MutexLock lock(&mu_);
  const uint64_t handle = NextHandle();
  buffers_[handle] = std::move(buffer);
  return handle;
}

absl::StatusOr<std::shared_ptr<SessionBuffer>> HandleTable::Find(uint64_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = handle == 0 ? buffers_.end() : buffers_.find(handle);
  if (it == buffers_.end()) return NoBuffer(handle);
  return it->second;
}

absl::StatusOr<std::shared_ptr<SessionBuffer>> HandleTable::Remove(uint64_t handle) {
  std::shared_ptr<SessionBuffer> buffer;
  {
    absl::MutexLock lock(&mu_);
    auto it = handle == 0 ? buffers_.end() : buffers_.find(handle);
    if (it == buffers_.end()) return NoBuffer(handle);
    buffer = std::move(it->second);
    buffers_.erase(it);
  }
  ReleaseMemory(BufferCharge(buffer->size()));
  return buffer;
}

std::vector<std::shared_ptr<SessionBuffer>> HandleTable::Clear() {
  absl::flat_hash_map<uint64_t, std::shared_ptr<SessionBuffer>> buffers;
  {
    absl::MutexLock lock(&mu_);
    buffers.swap(buffers_);
  }
  std::vector<std::shared_ptr<SessionBuffer>> out;
  out.reserve(buffers.size());
  for (auto& [handle, buffer] : buffers) {
    ReleaseMemory(BufferCharge(buffer->size()));
    out.push_back(std::move(buffer));
  }
  return out;
}

size_t HandleTable::buffer_count() const {
  absl::MutexLock lock(&mu_);
  return buffers_.size();
}

void HandleTable::AddModelFile(uint64_t file) {
  absl::MutexLock lock(&mu_);
  model_files_.insert(file);
}

absl::StatusOr<uint64_t> HandleTable::ModelFile(uint64_t handle) const {
  absl::MutexLock lock(&mu_);
  if (!model_files_.contains(handle)) {
    return absl::NotFoundError(
        absl::StrCat("model file handle ", handle, " was not opened by this session"));
  }
  return handle;
}

}  // namespace tg::server
