// PeerReduceStream: one long-lived PeerReduceStream call from this server to a peer, which
// carries the all-reduce pieces one session sends there (CollectiveRunner), so that a piece
// costs one message on an open HTTP/2 stream instead of a call of its own (a call's headers,
// trailers and reply, and a thread hand-off on each side, were most of a decode step's
// all-reduce). Send queues a piece and returns at once; pieces go out in order, one write at
// a time, from gRPC's threads. The peer sends nothing back: it ends the call only to refuse
// a piece (a grant it did not make, a piece too large), and a transport failure ends it too;
// either way every later Send and status() return why, as "peer unreachable: ENDPOINT" for
// a transport failure (the details go to the log) or the peer's own error. The call carries
// the sending session's key (PeerPushes::SenderKey), so that the peer drops the pieces it
// holds from that session when told the session ended (PeerPushes::SenderEnded).
// Thread-safe; the destructor cancels the call and waits for gRPC to be done with it.
#ifndef TENSORGRID_SERVER_PEER_REDUCE_STREAM_H_
#define TENSORGRID_SERVER_PEER_REDUCE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {

class PeerReduceStream final : public grpc::ClientBidiReactor<tensorgrid::v1::PeerReduceRequest,
                                                              tensorgrid::v1::PeerReduceReply> {
 public:
  // Starts the call on `channel` to `endpoint` (the name errors carry), with `auth_token` as
  // its bearer token unless empty (peers with --auth-token-file require this server's), and
  // `sender` as the sending session's key (PeerPushes::kSenderKey) unless empty.
  PeerReduceStream(const std::shared_ptr<grpc::Channel>& channel, std::string endpoint,
                   const std::string& auth_token = "", const std::string& sender = "");
  ~PeerReduceStream() override;

  // Queues `piece`; the reason the call ended, if it has.
  absl::Status Send(tensorgrid::v1::PeerReduceRequest piece) ABSL_LOCKS_EXCLUDED(mu_);
  // OK while the call is open; else why it ended.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the call has ended, without waiting for the reason as status() may.
  bool ended() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone(const grpc::Status& status) override ABSL_LOCKS_EXCLUDED(mu_);
  // The call is over (closed, or a write or read failed): nothing more is sent. True when
  // the caller is to let go of the hold (RemoveHold, outside the lock), so that gRPC ends the
  // call and OnDone says why.
  bool EndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why the call ended (ended_ is set): the status OnDone brings, waited for a moment; a call
  // with no status of its own (or none yet) is a peer that cannot be reached.
  absl::Status EndReasonLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string endpoint_;
  std::unique_ptr<tensorgrid::v1::TensorGrid::Stub> stub_;
  grpc::ClientContext context_;
  tensorgrid::v1::PeerReduceReply ignored_;  // the peer sends none; a read sees the end.
  mutable absl::Mutex mu_;
  // Pieces not written yet; the front one is being written while writing_.
  std::deque<tensorgrid::v1::PeerReduceRequest> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // a write or read failed: nothing more is sent.
  bool hold_ ABSL_GUARDED_BY(mu_) = true;    // Sends come from outside gRPC's reactions.
  bool done_ ABSL_GUARDED_BY(mu_) = false;   // OnDone ran.
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_PEER_REDUCE_STREAM_H_
