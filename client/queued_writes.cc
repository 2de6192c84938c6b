#include "client/queued_writes.h"

#include <utility>

namespace tg::rpc {

void QueuedWrites::Add(uint64_t buffer, uint64_t offset, const void* data, size_t size) {
  tensorgrid::v1::WriteRange& w = writes_.emplace_back();
  w.set_buffer(buffer);
  w.set_offset(offset);
  w.set_data(data, size);
  bytes_ += size;
}

void QueuedWrites::MoveInto(tensorgrid::v1::Compute& compute) {
  for (tensorgrid::v1::WriteRange& w : writes_) *compute.add_inputs() = std::move(w);
  writes_.clear();
  bytes_ = 0;
}

std::vector<tensorgrid::v1::SessionRequest> QueuedWrites::TakeAsCommands() {
  std::vector<tensorgrid::v1::SessionRequest> out(writes_.size());
  for (size_t i = 0; i < writes_.size(); ++i) *out[i].mutable_write() = std::move(writes_[i]);
  writes_.clear();
  bytes_ = 0;
  return out;
}

}  // namespace tg::rpc
