#include "client/load_progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace tg::rpc {
namespace {

// Redraws per second: enough to look live, few enough to cost nothing.
constexpr absl::Duration kRedrawEvery = absl::Milliseconds(250);

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string FormatLoadProgress(absl::Span<const ServerProgress> servers, double seconds) {
  std::string line = "loading:";
  uint64_t done = 0, total = 0;
  const double s = seconds > 0 ? seconds : 1e-9;
  for (const ServerProgress& p : servers) {
    absl::StrAppendFormat(&line, " %s %d%% %.0f MB/s |", p.endpoint,
                          p.total == 0 ? 100 : static_cast<int>(100 * p.done / p.total),
                          p.done / 1e6 / (p.seconds > 0 ? p.seconds : s));
    done += p.done;
    total += p.total;
  }
  absl::StrAppendFormat(&line, " all %.0f MB/s, %.0f/%.0f MB", done / 1e6 / s, done / 1e6,
                        total / 1e6);
  return line;
}

LoadProgress::LoadProgress(bool enabled, Poll poll) : poll_(std::move(poll)), start_(Now()) {
  if (!enabled || isatty(STDERR_FILENO) != 1) {
    stop_.Notify();
    return;
  }
  thread_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(kRedrawEvery)) Draw(false);
  });
}

LoadProgress::~LoadProgress() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
  Draw(true);
}

void LoadProgress::Draw(bool final) {
  const std::string line = FormatLoadProgress(poll_(), Now() - start_);
  std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace tg::rpc
