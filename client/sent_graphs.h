// SentGraphs: the keys of the graphs this client sent to one server recently, so that a
// Compute of a graph the server has cached carries only its key (a decode loop sends the
// same graph every step). The server keeps more graphs than this remembers, so a key-only
// Compute never misses unless the server refused the graph. Thread-safe: Compute marks keys
// on the caller's thread, a refused Compute's reply handler forgets them on whichever thread
// drains the connection.
#ifndef TENSORGRID_CLIENT_SENT_GRAPHS_H_
#define TENSORGRID_CLIENT_SENT_GRAPHS_H_

#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tg::rpc {

class SentGraphs {
 public:
  // Half the graphs a server session caches (kGraphCacheSize in server/graph_cache.h), so every
  // remembered key is still cached there.
  static constexpr size_t kCapacity = 16;

  // True when the graph of `key` was sent recently (the server has it); otherwise records
  // that it is being sent now. Either way it becomes the most recent key.
  bool MarkSent(uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);
  // The server refused the graph of `key`: send it whole next time.
  void Forget(uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::deque<uint64_t> keys_ ABSL_GUARDED_BY(mu_);  // most recent last.
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_SENT_GRAPHS_H_
