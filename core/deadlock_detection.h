// Abseil's mutex deadlock detection for a whole process, set from TG_DEADLOCK_DETECTION.
// Debian's Abseil is built without NDEBUG, so its own default is "abort": a lock-order cycle
// seen once (two mutexes ever taken in both orders, whether or not the two paths can meet)
// kills the process, and every Lock of a thread already holding one pays for the bookkeeping.
// A server must not die of that, so the binaries call ConfigureDeadlockDetection first thing
// and default to "ignore", as Abseil's release builds do. The test presets set "abort", so
// the binaries that tests start keep checking their lock order (unit tests keep Abseil's
// default). Thread-safety: call once, before the process starts threads.
#ifndef TENSORGRID_CORE_DEADLOCK_DETECTION_H_
#define TENSORGRID_CORE_DEADLOCK_DETECTION_H_

#include "absl/status/status.h"

namespace tg {

// TG_DEADLOCK_DETECTION: "ignore" (the default when unset or empty), "report" (print the
// cycle and carry on) or "abort". Any other value is INVALID_ARGUMENT naming it, and the mode
// is left as it was.
absl::Status ConfigureDeadlockDetection();

}  // namespace tg

#endif  // TENSORGRID_CORE_DEADLOCK_DETECTION_H_
