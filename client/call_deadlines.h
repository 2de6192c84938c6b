// CallDeadlines: how long a client may wait on one rpc-server before calling it stalled.
// Every call gets a deadline made of a fixed allowance (connection setup, a busy server's
// queue) plus its bytes at the link speed measured on this connection's own transfers, with
// slack for a link that slows down, and, for session commands, an allowance for the compute
// itself. So no wait is unbounded: a server that stops answering but keeps its TCP
// connection open (a stuck device, a full disk; SIGSTOP is also caught sooner by keepalive,
// proto/grpc_channel.h) is reported lost like one that died. Thread-safe.
#ifndef TENSORGRID_CLIENT_CALL_DEADLINES_H_
#define TENSORGRID_CLIENT_CALL_DEADLINES_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tg::rpc {

struct DeadlineAllowances {
  // Every call: a TLS handshake and a server busy with other sessions over a slow link.
  absl::Duration base = absl::Seconds(10);
  // A session command's compute on top of its transfer: the longest graph a server may run
  // (a large prefill on a CPU server) before the client gives up on it.
  absl::Duration compute = absl::Seconds(300);
  // The link may get this many times slower than measured before a call counts as stalled.
  double slack = 4;
  // Until a transfer was measured: a slow WAN link (8 Mbit/s), so early deadlines are long.
  double assumed_bytes_per_second = 1 << 20;
};

class CallDeadlines {
 public:
  // Transfers smaller than this say more about latency than about the link's speed.
  static constexpr size_t kMinSampleBytes = size_t{256} << 10;
  // Weight of a new measurement in the running estimate: a few transfers settle it, one
  // slow transfer on a busy host does not halve it.
  static constexpr double kNewSampleWeight = 0.25;

  explicit CallDeadlines(DeadlineAllowances allowances = {}) : allowances_(allowances) {}

  // A finished transfer of `bytes` that took `took` (ignored when too small to measure).
  void RecordTransfer(size_t bytes, absl::Duration took) ABSL_LOCKS_EXCLUDED(mu_);
  double bytes_per_second() const ABSL_LOCKS_EXCLUDED(mu_);
  const DeadlineAllowances& allowances() const { return allowances_; }

  // A bulk transfer (Upload, Download) of `bytes`: base + bytes / speed * slack.
  absl::Duration ForTransfer(size_t bytes) const ABSL_LOCKS_EXCLUDED(mu_);
  // Session commands carrying `bytes` both ways: ForTransfer(bytes) + the compute allowance.
  absl::Duration ForCommands(size_t bytes) const ABSL_LOCKS_EXCLUDED(mu_);
  // What ForCommands(bytes) is made of, for an error message.
  std::string ExplainCommands(size_t bytes) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const DeadlineAllowances allowances_;
  mutable absl::Mutex mu_;
  double measured_ ABSL_GUARDED_BY(mu_) = 0;  // bytes/s; 0 until a transfer was measured.
};

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_CALL_DEADLINES_H_
