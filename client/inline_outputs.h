// InlineOutputs: the output bytes a Compute returned in its reply (a decode step's logits or
// pick), so that reading them back costs no round trip. They hold until a command that may
// write is sent after that Compute: a reply read later (commands are posted ahead of their
// replies) does not bring stale bytes back. Thread-safe: reply handlers add outputs on
// whichever thread drains the connection, readers read on their own.
#ifndef TENSORGRID_CLIENT_INLINE_OUTPUTS_H_
#define TENSORGRID_CLIENT_INLINE_OUTPUTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::rpc {

// True when [offset, offset + size) lies inside [outer_offset, outer_offset + outer_size)
// (no overflow for any values).
inline bool RangeInside(uint64_t offset, uint64_t size, uint64_t outer_offset,
                        uint64_t outer_size) {
  return offset >= outer_offset && size <= outer_size && offset - outer_offset <= outer_size - size;
}

// False for the commands that change no buffer bytes (reads, allocations, frees, grants,
// statistics); true for every other, a Compute included.
bool CommandMayWrite(const tensorgrid::v1::SessionRequest& request);

class InlineOutputs {
 public:
  // Files `bytes` found at `offset` of `buffer` by the Compute with request id `command_id`;
  // dropped at once when a command that may write was sent after it.
  void Add(uint64_t command_id, uint64_t buffer, uint64_t offset, std::string bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // True when [offset, offset + size) of `buffer` is among the outputs (copied into data).
  bool Read(uint64_t buffer, uint64_t offset, void* data, size_t size) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // A command that may write went out with request id `id` (or, as last sent + 1, bytes are
  // about to change by another path): outputs of commands before it no longer hold.
  void StaleBefore(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The buffer is freed: its outputs go.
  void ForgetBuffer(uint64_t buffer) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Output {
    uint64_t command_id, buffer, offset;
    std::string bytes;
  };
  mutable absl::Mutex mu_;
  std::vector<Output> outputs_ ABSL_GUARDED_BY(mu_);
  uint64_t valid_from_ ABSL_GUARDED_BY(mu_) = 0;  // outputs of earlier commands are stale.
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_INLINE_OUTPUTS_H_
