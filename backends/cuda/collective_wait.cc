#include "backends/cuda/collective_wait.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tg::cuda {
namespace {

constexpr int64_t kMicrosPerSecond = 1000000;
constexpr int64_t kMaxTimeoutSeconds = 86400;

}  // namespace

WaitClock WaitClock::Real() {
  return {[] {
            return std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                .count();
          },
          [](int64_t us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }};
}

absl::Status WaitForCollective(absl::FunctionRef<CollectiveProgress()> poll, int64_t timeout_us,
                               absl::string_view what, const WaitClock& clock) {
  const int64_t start = clock.now_us();
  int64_t sleep = 1;
  for (int polls = 0;; ++polls) {
    CollectiveProgress p = poll();
    if (!p.error.ok()) {
      return absl::Status(p.error.code(), absl::StrCat(what, ": ", p.error.message()));
    }
    if (p.done) return absl::OkStatus();
    const int64_t waited = clock.now_us() - start;
    if (waited >= timeout_us) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, " did not finish in ", timeout_us / kMicrosPerSecond,
          " s (TG_NCCL_TIMEOUT_S): a rank is stuck or a link failed; the communicator is aborted"));
    }
    if (polls < kSpinPolls) continue;
    clock.sleep_us(std::min(sleep, timeout_us - waited));
    sleep = std::min(kMaxPollSleepUs, sleep * 2);
  }
}

int64_t CollectiveTimeoutUs(const char* env_value, std::string* note) {
  int64_t seconds = kDefaultCollectiveTimeoutSeconds;
  if (env_value != nullptr && *env_value != '\0') {
    int64_t v = 0;
    if (absl::SimpleAtoi(env_value, &v) && v >= 1 && v <= kMaxTimeoutSeconds) {
      seconds = v;
    } else if (note != nullptr) {
      *note =
          absl::StrCat("TG_NCCL_TIMEOUT_S='", env_value, "' is not a number of seconds from 1 to ",
                       kMaxTimeoutSeconds, "; using ", seconds);
    }
  }
  return seconds * kMicrosPerSecond;
}

}  // namespace tg::cuda
