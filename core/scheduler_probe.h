// What one more split costs on a set of devices, measured with a trivial graph: a chain of
// tiny MUL nodes (16 floats each), once with every weight on the first device (one split) and
// once with the weights alternating over the devices (one split per node, a 64-byte copy
// each). The difference per extra split is the scheduler's bookkeeping, the stream's dispatch
// (e.g. waking a CPU thread pool) and a minimal transfer: the floor a split adds to a decode
// step whatever its size. For tg-bench. Uses the streams given; not thread-safe with other
// users of those streams.
#ifndef TENSORGRID_CORE_SCHEDULER_PROBE_H_
#define TENSORGRID_CORE_SCHEDULER_PROBE_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/scheduler.h"

namespace tg {

struct SplitOverhead {
  int splits = 0;             // splits of the alternating chain.
  double one_split_us = 0;    // median time of the chain on one device.
  double many_splits_us = 0;  // median time of the alternating chain.
  double per_split_us = 0;    // (many - one) / (splits - 1).
};

// FAILED_PRECONDITION with fewer than two backends.
absl::StatusOr<SplitOverhead> MeasureSplitOverhead(absl::Span<const SchedulerBackend> backends,
                                                   int repetitions = 200);

}  // namespace tg

#endif  // TENSORGRID_CORE_SCHEDULER_PROBE_H_
