#include "server/reply_sequencer.h"

#include <algorithm>
#include <utility>

#include "core/lost_endpoint.h"

namespace tg::server {

namespace pb = ::tensorgrid::v1;

ReplySequencer::ReplySequencer(Send send, CommandProgress* progress)
    : send_(std::move(send)), progress_(progress) {}

ReplySequencer::Group* ReplySequencer::Open(uint64_t request_id, bool batch, int n) {
  auto group = std::make_unique<Group>();
  group->request_id = request_id;
  group->batch = batch;
  const size_t count = batch ? static_cast<size_t>(std::max(n, 0)) : 1;
  group->replies.resize(count);
  group->missing = count;
  MutexLock lock(&mu_);
  groups_.push_back(std::move(group));
  Group* raw = groups_.back().get();
  if (count == 0) SendReadyLocked();  // an empty batch is answered at once.
  return raw;
}

void ReplySequencer::Fill(Group* group, int i, pb::SessionReply reply) {
  MutexLock lock(&mu_);
  group->replies[i] = std::move(reply);
  --group->missing;
  SendReadyLocked();
}

void ReplySequencer::SendReadyLocked() {
  const size_t before = groups_.size();
  while (!groups_.empty() && groups_.front()->missing == 0) {
    if (progress_ != nullptr) {
      for (const pb::SessionReply& r : groups_.front()->replies) {
        progress_->Advance(
            r.id(), r.code() == 0
                        ? absl::OkStatus()
                        : WithLostEndpoint(
                              absl::Status(static_cast<absl::StatusCode>(r.code()), r.message()),
                              r.lost_endpoint()));
      }
    }
    if (ok_) ok_ = SendGroupLocked(*groups_.front());
    groups_.pop_front();
  }
  if (groups_.size() != before) sent_.notify_all();
}

bool ReplySequencer::SendGroupLocked(Group& group) {
  if (!group.batch) return send_(group.replies[0]);
  pb::SessionReply message;
  message.set_id(group.request_id);
  pb::BatchReply* replies = message.mutable_batch();
  size_t bytes_in_message = 0;
  for (pb::SessionReply& reply : group.replies) {
    const size_t bytes = reply.ByteSizeLong();
    if (bytes_in_message > 0 && bytes_in_message + bytes > kMaxBatchReplyBytes) {
      if (!send_(message)) return false;
      replies->clear_replies();
      bytes_in_message = 0;
    }
    *replies->add_replies() = std::move(reply);
    bytes_in_message += bytes;
  }
  return send_(message);
}

void ReplySequencer::WaitSent() {
  MutexLock lock(&mu_);
  sent_.wait(lock.native(), [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return groups_.empty(); });
}

bool ReplySequencer::ok() const {
  MutexLock lock(&mu_);
  return ok_;
}

}  // namespace tg::server
