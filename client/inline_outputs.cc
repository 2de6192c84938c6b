#include "client/inline_outputs.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace tg::rpc {

bool CommandMayWrite(const tensorgrid::v1::SessionRequest& request) {
  return !request.has_read() && !request.has_alloc_buffer() && !request.has_free_buffer() &&
         !request.has_grant_peer_read() && !request.has_cache_stats();
}

void InlineOutputs::Add(uint64_t command_id, uint64_t buffer, uint64_t offset, std::string bytes) {
  absl::MutexLock lock(&mu_);
  if (command_id < valid_from_) return;
  outputs_.push_back({command_id, buffer, offset, std::move(bytes)});
}

bool InlineOutputs::Read(uint64_t buffer, uint64_t offset, void* data, size_t size) const {
  absl::MutexLock lock(&mu_);
  for (auto o = outputs_.rbegin(); o != outputs_.rend(); ++o) {  // the newest first.
    if (o->buffer == buffer && RangeInside(offset, size, o->offset, o->bytes.size())) {
      std::memcpy(data, o->bytes.data() + (offset - o->offset), size);
      return true;
    }
  }
  return false;
}

void InlineOutputs::StaleBefore(uint64_t id) {
  absl::MutexLock lock(&mu_);
  valid_from_ = std::max(valid_from_, id);
  std::erase_if(outputs_, [this](const Output& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return o.command_id < valid_from_;
  });
}

void InlineOutputs::ForgetBuffer(uint64_t buffer) {
  absl::MutexLock lock(&mu_);
  std::erase_if(outputs_, [buffer](const Output& o) { return o.buffer == buffer; });
}

}  // namespace tg::rpc
