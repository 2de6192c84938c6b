// Waiting for an asynchronous collective (NCCL) without hanging: the host polls the queued
// work's completion and the communicators' asynchronous error state until the work is done,
// an error is reported, or the timeout passes. A collective that never finishes (a rank
// stuck, a link gone) thus ends in a status naming the call instead of a hang; the caller
// then aborts the communicators. The polling logic is plain C++ over an injectable clock,
// unit-tested without a GPU. Thread-safe (no shared state).
#ifndef TENSORGRID_BACKENDS_CUDA_COLLECTIVE_WAIT_H_
#define TENSORGRID_BACKENDS_CUDA_COLLECTIVE_WAIT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tg::cuda {

// How long a collective may take before it counts as hung. The wait covers the device work
// queued before it (a collective starts after the compute that produced its inputs), and the
// longest such step (a 512-token prompt layer of a 70B model) takes well under a second: a
// minute only separates a hang from slow work. TG_NCCL_TIMEOUT_S overrides it.
inline constexpr int64_t kDefaultCollectiveTimeoutSeconds = 60;
// Polling: the first kSpinPolls polls back to back (a decode-sized all-reduce finishes in
// microseconds), then sleeps growing to kMaxPollSleepUs (a long wait costs no CPU).
inline constexpr int kSpinPolls = 64;
inline constexpr int64_t kMaxPollSleepUs = 1000;

struct CollectiveProgress {
  bool done = false;   // every rank's queued work has completed.
  absl::Status error;  // an asynchronous error a communicator reported (or a CUDA error).
};

struct WaitClock {
  std::function<int64_t()> now_us;  // monotonic microseconds.
  std::function<void(int64_t)> sleep_us;
  static WaitClock Real();
};

// Polls until done (OK), an error (that error, prefixed with `what`), or timeout_us
// (DEADLINE_EXCEEDED naming `what`, the timeout and TG_NCCL_TIMEOUT_S).
absl::Status WaitForCollective(absl::FunctionRef<CollectiveProgress()> poll, int64_t timeout_us,
                               absl::string_view what, const WaitClock& clock);

// TG_NCCL_TIMEOUT_S (seconds, 1 to 86400) or the default, in microseconds; a bad value keeps
// the default and sets *note.
int64_t CollectiveTimeoutUs(const char* env_value, std::string* note);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_COLLECTIVE_WAIT_H_
