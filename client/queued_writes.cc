#include "client/queued_writes.h"

#include <algorithm>
#include <utility>

namespace tg::rpc {

void QueuedWrites::Add(uint32_t device, uint64_t buffer, uint64_t offset, const void* data,
                       size_t size) {
  Write& w = writes_.emplace_back();
  w.device = device;
  w.range.set_buffer(buffer);
  w.range.set_offset(offset);
  w.range.set_data(data, size);
  bytes_ += size;
}

bool QueuedWrites::HasFor(uint32_t device) const {
  return std::any_of(writes_.begin(), writes_.end(),
                     [device](const Write& w) { return w.device == device; });
}

void QueuedWrites::MoveInto(tensorgrid::v1::Compute& compute) {
  // The others close up in place, in order: the queue keeps its memory for the next step.
  size_t kept = 0;
  for (size_t i = 0; i < writes_.size(); ++i) {
    Write& w = writes_[i];
    if (w.device != compute.device()) {
      if (kept != i) writes_[kept] = std::move(w);
      ++kept;
      continue;
    }
    bytes_ -= w.range.data().size();
    *compute.add_inputs() = std::move(w.range);
  }
  writes_.resize(kept);
}

std::vector<tensorgrid::v1::SessionRequest> QueuedWrites::TakeAsCommands() {
  std::vector<tensorgrid::v1::SessionRequest> out(writes_.size());
  for (size_t i = 0; i < writes_.size(); ++i) *out[i].mutable_write() = std::move(writes_[i].range);
  writes_.clear();
  bytes_ = 0;
  return out;
}

}  // namespace tg::rpc
