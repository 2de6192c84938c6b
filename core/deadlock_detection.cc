#include "core/deadlock_detection.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tg {

absl::Status ConfigureDeadlockDetection() {
  const char* env = std::getenv("TG_DEADLOCK_DETECTION");
  const absl::string_view value = env == nullptr ? "" : env;
  absl::OnDeadlockCycle mode;
  if (value.empty() || value == "ignore") {
    mode = absl::OnDeadlockCycle::kIgnore;
  } else if (value == "report") {
    mode = absl::OnDeadlockCycle::kReport;
  } else if (value == "abort") {
    mode = absl::OnDeadlockCycle::kAbort;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("TG_DEADLOCK_DETECTION=", value,
                                                   ": expected ignore, report or abort"));
  }
  absl::SetMutexDeadlockDetectionMode(mode);
  return absl::OkStatus();
}

}  // namespace tg
