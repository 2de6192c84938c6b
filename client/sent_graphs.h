// SentGraphs: the keys of the graphs this client sent to one server recently, so that a
// Compute of a graph the server has cached carries only its key (a decode loop sends the
// same graphs every step). It remembers at most half the graphs, and half the tensors, that a
// server session keeps (rpc::kGraphCacheGraphs, rpc::kGraphCacheTensors), so a key-only
// Compute never misses unless the server refused the graph or its session ran out of memory.
// Thread-safe: Compute marks keys on the caller's thread, a refused Compute's reply handler
// forgets them on whichever thread drains the connection.
#ifndef TENSORGRID_CLIENT_SENT_GRAPHS_H_
#define TENSORGRID_CLIENT_SENT_GRAPHS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/protocol.h"

namespace tg::rpc {

class SentGraphs {
 public:
  static constexpr size_t kMaxGraphs = kGraphCacheGraphs / 2;
  static constexpr size_t kMaxTensors = kGraphCacheTensors / 2;

  // True when the graph of `key` was sent recently (the server has it); it becomes the most
  // recent.
  bool Known(uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);
  // Records that the graph of `key`, of `tensors` tensors (its GraphDesc's), is sent now, as
  // the most recent; the oldest are forgotten past the bounds.
  void Sent(uint64_t key, size_t tensors) ABSL_LOCKS_EXCLUDED(mu_);
  // The server refused the graph of `key`: send it whole next time.
  void Forget(uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Graph {
    uint64_t key;
    size_t tensors;
  };
  // Takes the graph of `key` out of the list (its tensors uncounted); nullopt when unknown.
  std::optional<Graph> TakeLocked(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  std::deque<Graph> graphs_ ABSL_GUARDED_BY(mu_);  // most recent last.
  size_t tensors_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_SENT_GRAPHS_H_
