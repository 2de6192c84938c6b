#include "server/peer_reduce_stream.h"

#include <utility>

#include "absl/time/time.h"
#include "server/peer_client.h"
#include "server/peer_pushes.h"

namespace tg::server {

namespace pb = ::tensorgrid::v1;

namespace {

// How long a Send or status() on a call that has ended waits for OnDone to say why: gRPC
// runs it as soon as the failed read or write has returned, so only a wedged gRPC waits out.
constexpr absl::Duration kEndReasonWait = absl::Seconds(2);

}  // namespace

PeerReduceStream::PeerReduceStream(const std::shared_ptr<grpc::Channel>& channel,
                                   std::string endpoint, const std::string& auth_token,
                                   const std::string& sender)
    : endpoint_(std::move(endpoint)), stub_(pb::TensorGrid::NewStub(channel)) {
  PeerClient::Authorize(auth_token, &context_);
  if (!sender.empty()) context_.AddMetadata(PeerPushes::kSenderKey, sender);
  stub_->async()->PeerReduceStream(&context_, this);
  // The peer never sends: this read completes when the call ends, whoever ends it.
  StartRead(&ignored_);
  AddHold();
  StartCall();
}

PeerReduceStream::~PeerReduceStream() {
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    release = EndLocked();
  }
  context_.TryCancel();
  if (release) RemoveHold();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

absl::Status PeerReduceStream::Send(pb::PeerReduceRequest piece) {
  const pb::PeerReduceRequest* next = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return EndReasonLocked();
    queue_.push_back(std::move(piece));
    if (!writing_) {
      writing_ = true;
      next = &queue_.front();  // a deque's elements stay put as others are added.
    }
  }
  if (next != nullptr) StartWrite(next);
  return absl::OkStatus();
}

absl::Status PeerReduceStream::status() const {
  absl::MutexLock lock(&mu_);
  return ended_ ? EndReasonLocked() : absl::OkStatus();
}

bool PeerReduceStream::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

absl::Status PeerReduceStream::EndReasonLocked() const {
  // ended_ is set when a read or write fails, a moment before OnDone brings the peer's status:
  // answering in between would call a peer that refused a piece unreachable.
  mu_.AwaitWithTimeout(absl::Condition(&done_), kEndReasonWait);
  if (!done_ || status_.ok()) return PeerClient::Unreachable(endpoint_);
  return status_;
}

void PeerReduceStream::OnWriteDone(bool ok) {
  const pb::PeerReduceRequest* next = nullptr;
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    queue_.pop_front();
    if (!ok || ended_) {
      writing_ = false;
      queue_.clear();
      release = EndLocked();
    } else if (queue_.empty()) {
      writing_ = false;
    } else {
      next = &queue_.front();
    }
  }
  if (next != nullptr) StartWrite(next);
  if (release) RemoveHold();
}

void PeerReduceStream::OnReadDone(bool ok) {
  if (ok) {  // the peer sent something it should not: ignore it, keep watching for the end.
    StartRead(&ignored_);
    return;
  }
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    if (writing_) {
      ended_ = true;  // the write in flight fails now and lets go of the hold itself.
    } else {
      release = EndLocked();
    }
  }
  if (release) RemoveHold();
}

bool PeerReduceStream::EndLocked() {
  ended_ = true;
  return std::exchange(hold_, false);
}

void PeerReduceStream::OnDone(const grpc::Status& status) {
  absl::Status s = PeerClient::PeerStatus(endpoint_, status, "peer_reduce");
  absl::MutexLock lock(&mu_);
  ended_ = true;
  queue_.clear();
  status_ = std::move(s);
  done_ = true;
}

}  // namespace tg::server
