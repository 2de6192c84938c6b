// LoadProgress: the one progress line on stderr while a model loads onto rpc-servers, with
// each server's rate and the rate of all together, e.g.
//   loading: 127.0.0.1:50052 41% 612 MB/s | 127.0.0.1:50053 40% 598 MB/s | all 1210 MB/s, 250/610
//   MB
// redrawn in place a few times a second by a thread of its own, on a terminal only.
// Thread-safe.
#ifndef TENSORGRID_CLIENT_LOAD_PROGRESS_H_
#define TENSORGRID_CLIENT_LOAD_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"

namespace tg::rpc {

struct ServerProgress {
  std::string endpoint;
  uint64_t done = 0;   // bytes in place.
  uint64_t total = 0;  // bytes it gets.
  double seconds = 0;  // it has been loading (until done); 0: as long as the whole load.
};

// The line for these servers after `seconds`.
std::string FormatLoadProgress(absl::Span<const ServerProgress> servers, double seconds);

class LoadProgress {
 public:
  using Poll = std::function<std::vector<ServerProgress>()>;
  // Starts redrawing when stderr is a terminal and `enabled`; polls `poll` each time.
  LoadProgress(bool enabled, Poll poll);
  // Draws the final line (and a newline) and stops.
  ~LoadProgress();
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;

 private:
  void Draw(bool final);

  const Poll poll_;
  const double start_;  // seconds on a monotonic clock.
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_LOAD_PROGRESS_H_
