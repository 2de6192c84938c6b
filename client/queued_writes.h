// QueuedWrites: small writes held back so that they ride along with the next session command
// instead of costing a message each: they become the next Compute's inputs (one message per
// decode step), or go out as Write commands just before any other command. Not thread-safe:
// SessionChannel keeps it under its lock, so that taking the writes and sending the command
// that carries them are one step.
#ifndef TENSORGRID_CLIENT_QUEUED_WRITES_H_
#define TENSORGRID_CLIENT_QUEUED_WRITES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::rpc {

class QueuedWrites {
 public:
  // More queued bytes than this are sent first (as Write commands): one Compute message
  // stays far below the protocol's kMaxInlineBytes.
  static constexpr size_t kMaxBytes = size_t{1} << 20;

  // Copies [data, data + size) to be written at `offset` of `buffer`, after the writes queued
  // before it.
  void Add(uint64_t buffer, uint64_t offset, const void* data, size_t size);
  bool empty() const { return writes_.empty(); }
  size_t bytes() const { return bytes_; }

  // Moves every queued write into `compute`'s inputs (the server writes them, in order,
  // before the graph runs).
  void MoveInto(tensorgrid::v1::Compute& compute);
  // Takes every queued write as a Write command (ids not set), in order.
  std::vector<tensorgrid::v1::SessionRequest> TakeAsCommands();

 private:
  std::vector<tensorgrid::v1::WriteRange> writes_;
  size_t bytes_ = 0;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_QUEUED_WRITES_H_
