#include "serve/latency_histogram.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tg::serve {

std::vector<double> LatencyHistogram::DefaultBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
}

LatencyHistogram::LatencyHistogram(std::string name, std::string help, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      bounds_(std::move(bounds)),
      counts_(new std::atomic<int64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void LatencyHistogram::Observe(absl::Duration d) {
  const int64_t ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(d));
  // Divided, not multiplied by 1e-9: the quotient is rounded once, so 2.5 ms is exactly the
  // double 0.0025 and lands in the bucket "le" it.
  const double seconds = static_cast<double>(ns) / 1e9;
  // The first bound >= the value: Prometheus buckets are "le" (less than or equal).
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin());
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.reserve(bounds_.size() + 1);
  int64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

void LatencyHistogram::AppendTo(std::string* out) const {
  const Snapshot s = Read();
  absl::StrAppend(out, "# HELP ", name_, " ", help_, "\n# TYPE ", name_, " histogram\n");
  for (size_t i = 0; i < s.bounds.size(); ++i) {
    // %g: 0.001, 0.0025, 60 — the shortest text of the bound, as Prometheus clients write it.
    absl::StrAppend(out, name_, "_bucket{le=\"", absl::StrFormat("%g", s.bounds[i]), "\"} ",
                    s.cumulative[i], "\n");
  }
  absl::StrAppend(out, name_, "_bucket{le=\"+Inf\"} ", s.count, "\n", name_, "_sum ",
                  absl::StrFormat("%.9f", s.sum_seconds), "\n", name_, "_count ", s.count, "\n");
}

}  // namespace tg::serve
