// LatencyHistogram: a Prometheus histogram of durations (in seconds) with fixed buckets, for
// tg-server's GET /metrics: `NAME_bucket{le="..."}` cumulative and ending in `+Inf`, then
// `NAME_sum` and `NAME_count`. Thread-safe and lock-free: Observe is a few relaxed atomic
// adds, so the decode thread can record every token without ever waiting on a scrape; a
// scrape concurrent with observations writes a histogram consistent in itself (`+Inf` equals
// `_count`; `_sum` may miss an observation still being added).
#ifndef TENSORGRID_SERVE_LATENCY_HISTOGRAM_H_
#define TENSORGRID_SERVE_LATENCY_HISTOGRAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tg::serve {

class LatencyHistogram {
 public:
  // Upper bounds (seconds) from 1 ms to 60 s, about 1-2.5-5 per decade: a token step on a GPU
  // is milliseconds, a first token behind a long prompt or a full queue tens of seconds.
  static std::vector<double> DefaultBounds();

  // `name` is the metric's (tg_server_..._seconds), `help` its one-line # HELP text;
  // `bounds` the buckets' upper bounds in seconds, increasing (+Inf is added).
  LatencyHistogram(std::string name, std::string help,
                   std::vector<double> bounds = DefaultBounds());

  // Records one duration (a negative one as 0).
  void Observe(absl::Duration d);

  struct Snapshot {
    std::vector<double> bounds;       // the upper bounds, without +Inf.
    std::vector<int64_t> cumulative;  // per bound, then +Inf: observations <= the bound.
    int64_t count = 0;                // == cumulative.back().
    double sum_seconds = 0;
  };
  Snapshot Read() const;

  // Appends the metric in Prometheus text format (# HELP, # TYPE, the series).
  void AppendTo(std::string* out) const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<double> bounds_;
  // Per bucket, not cumulative (the last one past every bound); summed up when read.
  std::unique_ptr<std::atomic<int64_t>[]> counts_;
  std::atomic<int64_t> sum_ns_{0};
};

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_LATENCY_HISTOGRAM_H_
