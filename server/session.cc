#include "server/session.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "server/memory_reservation.h"
#include "server/peer_pushes.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

// See log_id().
constexpr size_t kLoggedIdChars = 8;

}  // namespace

Session::Session(std::string id, SessionEnv env)
    : id_(std::move(id)),
      env_(std::move(env)),
      progress_(std::make_shared<CommandProgress>()),
      table_(HandleTable::Limits{.mem_limit = env_.mem_limit,
                                 .budget = env_.budget,
                                 .client = env_.client.get(),
                                 .max_buffers = env_.max_buffers,
                                 .predictable_handles = env_.predictable_handles}),
      graphs_(&table_),
      dispatch_(CommandDispatch::Env{.session_id = id_,
                                     .log_id = log_id(),
                                     .devices = env_.devices,
                                     .table = &table_,
                                     .graphs = &graphs_,
                                     .progress = progress_,
                                     .counters = &counters_,
                                     .cancelled = [this] { return cancelled(); },
                                     .metrics = env_.metrics,
                                     .grants = env_.grants,
                                     .peers = env_.peers,
                                     .models = env_.models,
                                     .cache = env_.cache,
                                     .collectives = env_.collectives,
                                     .recycler = env_.recycler,
                                     .pushes = env_.pushes}) {}

Session::~Session() { Close(); }

void Session::Cancel() { cancelled_.store(true); }

bool Session::cancelled() const {
  if (cancelled_.load()) return true;
  if (!env_.abandoned) return false;
  // One caller an interval asks (commands on several lanes may get here at once).
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t next = next_abandoned_poll_ns_.load(std::memory_order_relaxed);
  if (now < next || !next_abandoned_poll_ns_.compare_exchange_strong(
                        next, now + absl::ToInt64Nanoseconds(env_.abandoned_poll_interval),
                        std::memory_order_relaxed)) {
    return false;
  }
  // Once cancelled, the hook is never asked again (its stream may be gone by then).
  if (env_.abandoned()) {
    cancelled_.store(true);
    return true;
  }
  return false;
}

bool Session::AddStream(std::weak_ptr<CancellableStream> stream) {
  absl::MutexLock lock(&streams_mu_);
  if (closed_) return false;
  // Streams that ended are dropped as new ones come, so the list stays as long as the
  // streams open (twice at most).
  if (streams_in_flight_.size() >= 64 &&
      streams_in_flight_.size() == streams_in_flight_.capacity()) {
    std::erase_if(streams_in_flight_,
                  [](const std::weak_ptr<CancellableStream>& w) { return w.expired(); });
  }
  streams_in_flight_.push_back(std::move(stream));
  return true;
}

void Session::Close() {
  Cancel();
  dispatch_.Drain();   // nothing may run on what goes below.
  progress_->Close();  // peers waiting for a command of ours stop waiting.
  // What we pushed that nobody awaited goes from the destinations' mailboxes.
  if (env_.pushes != nullptr) env_.pushes->SenderEnded(id_);
  std::vector<std::weak_ptr<CancellableStream>> streams;
  {
    absl::MutexLock lock(&streams_mu_);
    closed_ = true;
    streams.swap(streams_in_flight_);
  }
  const absl::Status ended = absl::CancelledError("the session ended (its stream closed)");
  for (const auto& w : streams) {
    if (std::shared_ptr<CancellableStream> s = w.lock()) s->Cancel(ended);
  }
  graphs_.Clear();    // they point into the buffers.
  dispatch_.Close();  // device streams, grants and their mailbox.
  // Their charges go back as Free gives them back (to the server's budget above all).
  std::vector<std::shared_ptr<SessionBuffer>> buffers = table_.Clear();
  if (buffers.empty()) return;
  // Destructors report to metrics. Streams hold buffers weakly, so the memory goes here,
  // unless a peer's PeerCopy is reading it this moment.
  buffers.clear();
  ReleaseFreedHostMemory();  // what the session freed (also by Free before) goes back now.
}

std::string Session::log_id() const { return id_.substr(0, kLoggedIdChars); }

absl::Status CheckBatchSize(uint64_t commands) {
  if (commands <= static_cast<uint64_t>(kMaxBatchCommands)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("batch of %d commands exceeds the cap of %d per batch; send several batches",
                      commands, kMaxBatchCommands));
}

void Session::Post(std::shared_ptr<const pb::SessionRequest> request, ReplySequencer* replies) {
  if (request->has_batch()) {
    // Refused whole, before any command is queued.
    if (absl::Status s = CheckBatchSize(request->batch().commands_size()); !s.ok()) {
      return Refuse(request->id(), s, replies);
    }
  }
  // The message stays held until its last command has run: counted while it is queued.
  const uint64_t bytes = request->SpaceUsedLong();
  WaitForQueueRoom(bytes);
  struct Queued {
    Queued(std::shared_ptr<const pb::SessionRequest> r, Session* s, uint64_t n)
        : request(std::move(r)), session(s), bytes(n) {}
    Queued(const Queued&) = delete;
    Queued& operator=(const Queued&) = delete;
    ~Queued() { session->Dequeued(bytes); }
    const std::shared_ptr<const pb::SessionRequest> request;
    Session* const session;
    const uint64_t bytes;
  };
  auto queued = std::make_shared<Queued>(std::move(request), this, bytes);
  // Shares the count's lifetime: the bytes go back when the last task lets go of it.
  std::shared_ptr<const pb::SessionRequest> held(queued, queued->request.get());
  dispatch_.Run(std::move(held), replies);
}

void Session::Refuse(uint64_t id, const absl::Status& status, ReplySequencer* replies) {
  dispatch_.Refuse(id, status, replies);
}

void Session::WaitForQueueRoom(uint64_t bytes) {
  absl::MutexLock lock(&queue_mu_);
  auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return queued_bytes_ == 0 || queued_bytes_ + bytes <= kMaxQueuedRequestBytes || cancelled();
  };
  // Polled now and then too: cancelled() may turn true without anyone signalling.
  while (!room()) queue_mu_.AwaitWithTimeout(absl::Condition(&room), absl::Milliseconds(100));
  queued_bytes_ += bytes;
}

void Session::Dequeued(uint64_t bytes) {
  absl::MutexLock lock(&queue_mu_);
  queued_bytes_ -= bytes;
}

void Session::Quiesce() { dispatch_.Drain(); }

pb::SessionReply Session::Handle(const pb::SessionRequest& request) {
  pb::SessionReply out;
  ReplySequencer replies(
      [&](const pb::SessionReply& reply) {
        out = reply;
        return true;
      },
      progress_.get());
  dispatch_.RunOne(std::make_shared<const pb::SessionRequest>(request), &replies);
  replies.WaitSent();
  return out;
}

bool Session::Serve(const pb::SessionRequest& request,
                    absl::FunctionRef<bool(const pb::SessionReply&)> send) {
  ReplySequencer replies([&](const pb::SessionReply& reply) { return send(reply); },
                         progress_.get());
  Post(std::make_shared<const pb::SessionRequest>(request), &replies);
  replies.WaitSent();
  return replies.ok();
}

}  // namespace tg::server
