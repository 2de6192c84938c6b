// GraphCache: one session's decoded compute graphs, by (device, graph key), so that a client
// sends a graph once and names it by key after. A graph is charged to the session's memory
// (HandleTable::ReserveMemory) before it is decoded and while it is kept; the cache keeps at
// most rpc::kGraphCacheGraphs graphs of rpc::kGraphCacheTensors tensors in all (the bounds
// the client's SentGraphs counts against), dropping the least recently used first, and
// further as far as the session's memory limit needs. A kept graph holds the
// buffers it points into; freeing one of them drops the graphs that use it (DropUsing).
// Thread-safety: thread-safe (one mutex; a graph is decoded under it). A graph handed out
// stays valid while its holder keeps the shared_ptr, whatever the cache drops meanwhile.
#ifndef TENSORGRID_SERVER_GRAPH_CACHE_H_
#define TENSORGRID_SERVER_GRAPH_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "proto/protocol.h"
#include "server/graph_decoder.h"
#include "server/handle_table.h"
#include "server/memory_reservation.h"
#include "server/session_buffer.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

class GraphCache {
 public:
  struct Entry {
    uint32_t device;
    uint64_t key;
    size_t tensors;  // of its GraphDesc, counted against rpc::kGraphCacheTensors.
    // The graph's estimated bytes (charge->size()), charged to the session while the graph
    // lives; set before the graph is decoded.
    std::optional<MemoryReservation> charge;
    std::unique_ptr<DecodedGraph> graph;
    // What the graph points into, kept alive while a queued Compute holds the graph.
    std::vector<std::shared_ptr<SessionBuffer>> buffers;
  };

  // `table` resolves the graphs' buffer handles and is charged for them; it outlives the
  // cache.
  explicit GraphCache(HandleTable* table) : table_(table) {}
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The graph a Compute names (FAILED_PRECONDITION "send it again" when not kept), or the
  // one it carries, decoded for `device` (cmd.device()'s) and kept as the newest.
  absl::StatusOr<std::shared_ptr<Entry>> For(const tensorgrid::v1::Compute& cmd, Device* device)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the graphs that point into buffer `handle`.
  void DropUsing(uint64_t handle) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every graph (their charges go back once no queued Compute holds them).
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // The charges of the graphs kept.
  uint64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Drops the least recently used graphs until one more graph of `more` tensors fits in the
  // bounds.
  void Evict(size_t more) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HandleTable* const table_;
  mutable absl::Mutex mu_;
  std::list<std::shared_ptr<Entry>> graphs_ ABSL_GUARDED_BY(mu_);  // front: newest.
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_GRAPH_CACHE_H_
