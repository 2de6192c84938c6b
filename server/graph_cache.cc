#include "server/graph_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace tg::server {

namespace pb = ::tensorgrid::v1;

absl::StatusOr<std::shared_ptr<GraphCache::Entry>> GraphCache::For(const pb::Compute& cmd,
                                                                   Device* device) {
  auto same = [&](const std::shared_ptr<Entry>& c) {
    return c->device == cmd.device() && c->key == cmd.graph_key();
  };
  absl::MutexLock lock(&mu_);
  if (!cmd.has_graph()) {
    auto it = std::find_if(graphs_.begin(), graphs_.end(), same);
    if (it == graphs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("graph not cached (key %#x); send it again", cmd.graph_key()));
    }
    graphs_.splice(graphs_.begin(), graphs_, it);
    return graphs_.front();
  }
  TG_RETURN_IF_ERROR(CheckGraphSize(cmd.graph()));
  // Charged before decoding: room is made by dropping the oldest graphs, first down to the
  // cache's own bounds, then as far as the session's memory limit needs.
  const uint64_t bytes = DecodedGraphBytes(cmd.graph());
  Evict(static_cast<size_t>(cmd.graph().tensors_size()));
  absl::StatusOr<MemoryReservation> charge = table_->ReserveMemory(bytes);
  while (!charge.ok() && charge.status().code() == absl::StatusCode::kResourceExhausted &&
         !graphs_.empty()) {
    graphs_.pop_back();
    charge = table_->ReserveMemory(bytes);
  }
  if (!charge.ok()) {
    return absl::Status(
        charge.status().code(),
        absl::StrFormat("graph of %d tensors (about %d bytes decoded): %s",
                        cmd.graph().tensors_size(), bytes, charge.status().message()));
  }
  auto cached = std::make_shared<Entry>();
  cached->charge.emplace(*std::move(charge));
  BufferResolver resolve = [&](uint64_t handle) -> absl::StatusOr<ResolvedBuffer> {
    TG_ASSIGN_OR_RETURN(std::shared_ptr<SessionBuffer> buf, table_->Find(handle));
    // The graph may read any of it: bytes no write reached are zeroed first (a write queued
    // on the device's lane lands after, SessionBuffer orders the two).
    TG_RETURN_IF_ERROR(buf->ClearUnwritten());
    const ResolvedBuffer resolved{buf->buffer(), buf->size()};
    cached->buffers.push_back(std::move(buf));
    return resolved;
  };
  TG_ASSIGN_OR_RETURN(cached->graph, DecodeGraph(cmd.graph(), device, resolve));
  cached->device = cmd.device();
  cached->key = cmd.graph_key();
  cached->tensors = static_cast<size_t>(cmd.graph().tensors_size());
  graphs_.remove_if(same);
  graphs_.push_front(std::move(cached));
  return graphs_.front();
}

void GraphCache::Evict(size_t more) {
  size_t held = 0;
  for (const auto& g : graphs_) held += g->tensors;
  while (!graphs_.empty() && (held + more > rpc::kGraphCacheTensors ||
                              graphs_.size() + 1 > rpc::kGraphCacheGraphs)) {
    held -= graphs_.back()->tensors;
    graphs_.pop_back();
  }
}

void GraphCache::DropUsing(uint64_t handle) {
  absl::MutexLock lock(&mu_);
  graphs_.remove_if([handle](const std::shared_ptr<Entry>& c) {
    return std::binary_search(c->graph->handles.begin(), c->graph->handles.end(), handle);
  });
}

void GraphCache::Clear() {
  std::list<std::shared_ptr<Entry>> graphs;
  {
    absl::MutexLock lock(&mu_);
    graphs.swap(graphs_);
  }
}

size_t GraphCache::size() const {
  absl::MutexLock lock(&mu_);
  return graphs_.size();
}

uint64_t GraphCache::bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t held = 0;
  for (const auto& g : graphs_) held += g->charge->size();
  return held;
}

}  // namespace tg::server
