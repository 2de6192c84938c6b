// ClientMetrics: process-wide counters of what the client moved for its remote devices'
// collectives, for tools' reports (tg-run --json "rpc") and tests: the bytes of all-reduces
// that crossed the client (read from the servers and written back) and how many all-reduces
// the servers ran among themselves or had staged through the client. Thread-safe (atomics).
#ifndef TENSORGRID_CLIENT_CLIENT_METRICS_H_
#define TENSORGRID_CLIENT_CLIENT_METRICS_H_

#include <atomic>
#include <cstdint>

namespace tg::rpc {

struct ClientMetrics {
  std::atomic<uint64_t> allreduce_client_bytes{0};
  std::atomic<uint64_t> allreduce_on_servers{0};
  std::atomic<uint64_t> allreduce_staged{0};

  static ClientMetrics& Get();
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_CLIENT_METRICS_H_
