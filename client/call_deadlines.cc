#include "client/call_deadlines.h"

#include "absl/strings/str_format.h"

namespace tg::rpc {

void CallDeadlines::RecordTransfer(size_t bytes, absl::Duration took) {
  if (bytes < kMinSampleBytes || took <= absl::ZeroDuration()) return;
  const double speed = static_cast<double>(bytes) / absl::ToDoubleSeconds(took);
  absl::MutexLock lock(&mu_);
  measured_ = measured_ == 0 ? speed : measured_ + kNewSampleWeight * (speed - measured_);
}

double CallDeadlines::bytes_per_second() const {
  absl::MutexLock lock(&mu_);
  return measured_ > 0 ? measured_ : allowances_.assumed_bytes_per_second;
}

absl::Duration CallDeadlines::ForTransfer(size_t bytes) const {
  return allowances_.base +
         absl::Seconds(static_cast<double>(bytes) / bytes_per_second() * allowances_.slack);
}

absl::Duration CallDeadlines::ForCommands(size_t bytes) const {
  return ForTransfer(bytes) + allowances_.compute;
}

std::string CallDeadlines::ExplainCommands(size_t bytes) const {
  return absl::StrFormat("%s compute + %s base + %d bytes at %.1f MB/s x %.0f slack",
                         absl::FormatDuration(allowances_.compute),
                         absl::FormatDuration(allowances_.base), bytes, bytes_per_second() / 1e6,
                         allowances_.slack);
}

}  // namespace tg::rpc
