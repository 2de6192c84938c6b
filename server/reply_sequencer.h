// ReplySequencer: sends a Session stream's replies in request order however their commands
// finish. A session's commands run on its devices' lanes (server/device_lanes.h), so the
// command of device 1 may finish before an earlier one of device 0; the client reads
// replies in order and takes a reply as proof that everything before it has happened
// (docs/rpc.md, "Commands are posted"), so a reply leaves only when every earlier one has.
// A batch's replies leave together, in BatchReply messages of consecutive replies of up to
// kMaxBatchReplyBytes (one alone may be larger), as when the whole batch ran on one thread.
// Thread-safety: Open is called by the reading thread, in request order; Fill from any
// thread. Every field is guarded by mu_, which is held while sending so that messages
// leave one at a time and in order.
#ifndef TENSORGRID_SERVER_REPLY_SEQUENCER_H_
#define TENSORGRID_SERVER_REPLY_SEQUENCER_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"
#include "server/command_progress.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

// A BatchReply message is sent once its replies reach this size.
inline constexpr size_t kMaxBatchReplyBytes = size_t{4} << 20;

class ReplySequencer {
 public:
  // Writes one reply message; false when the stream is gone.
  using Send = std::function<bool(const tensorgrid::v1::SessionReply&)>;
  // The replies of one request (its fields are the sequencer's, under its lock).
  struct Group {
    uint64_t request_id = 0;
    bool batch = false;
    std::vector<tensorgrid::v1::SessionReply> replies;
    size_t missing = 0;  // replies not yet filed.
  };

  // `progress` (optional) learns of each command as its reply leaves (CommandProgress).
  explicit ReplySequencer(Send send, CommandProgress* progress = nullptr);
  ReplySequencer(const ReplySequencer&) = delete;
  ReplySequencer& operator=(const ReplySequencer&) = delete;

  // Opens the replies of the next request: one plain reply (batch false, n 1), or the n
  // replies of a batch whose request id is `request_id` (n 0: one empty BatchReply). The
  // group stays valid until its last Fill.
  Group* Open(uint64_t request_id, bool batch, int n) ABSL_LOCKS_EXCLUDED(mu_);
  // Files reply i of `group`, then sends every group at the front whose replies are all in.
  void Fill(Group* group, int i, tensorgrid::v1::SessionReply reply) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until every opened group has been sent, or dropped after a failed send.
  void WaitSent() ABSL_LOCKS_EXCLUDED(mu_);
  // False once a send has failed: later replies are dropped.
  bool ok() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void SendReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SendGroupLocked(Group& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Send send_;
  CommandProgress* const progress_;
  // A std::mutex underneath, for the condition variable (core/mutex.h).
  mutable Mutex mu_;
  std::condition_variable sent_;  // groups_ became shorter.
  std::deque<std::unique_ptr<Group>> groups_ ABSL_GUARDED_BY(mu_);
  bool ok_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_REPLY_SEQUENCER_H_
