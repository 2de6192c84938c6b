// QueuedWrites: small writes held back so that they ride along with the next session command
// instead of costing a message each: those into a device's memory become the inputs of that
// device's next Compute (one message per decode step), and all go out as Write commands just
// before any other command. A Compute on one device takes none of another's: the server would
// hold the other device's queue for it. Not thread-safe:
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

  // Copies [data, data + size) to be written at `offset` of `buffer` (memory of the server's
  // device `device`), after the writes queued before it.
  void Add(uint32_t device, uint64_t buffer, uint64_t offset, const void* data, size_t size);
  bool empty() const { return writes_.empty(); }
  // True when a write into memory of `device` is queued.
  bool HasFor(uint32_t device) const;
  size_t bytes() const { return bytes_; }

  // Moves the queued writes into memory of compute.device() into `compute`'s inputs (the
  // server writes them, in order, before the graph runs); the others stay queued.
  void MoveInto(tensorgrid::v1::Compute& compute);
  // Takes every queued write as a Write command (ids not set), in order.
  std::vector<tensorgrid::v1::SessionRequest> TakeAsCommands();

 private:
  struct Write {
    uint32_t device;
    tensorgrid::v1::WriteRange range;
  };
  std::vector<Write> writes_;
  size_t bytes_ = 0;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_QUEUED_WRITES_H_
