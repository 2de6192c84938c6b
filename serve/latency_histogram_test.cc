// LatencyHistogram: values land in the first bucket whose bound is >= them (a value equal to
// a bound included, each default bound too), buckets are cumulative and end in +Inf ==
// _count, _sum adds the values, and the Prometheus text says so; concurrent observers lose
// nothing, and a scrape beside them always reads a histogram consistent in itself.
#include "serve/latency_histogram.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tg::serve {
namespace {

// The text's samples: series (with labels) -> value.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &v)) << line;
    out[std::string(line.substr(0, space))] = v;
  }
  return out;
}

TEST(LatencyHistogramTest, ValuesLandInTheirBucketsCumulatively) {
  LatencyHistogram h("t_seconds", "test", {0.001, 0.01, 0.1});
  h.Observe(absl::Microseconds(500));  // <= 0.001
  h.Observe(absl::Milliseconds(1));    // == 0.001: still "le" 0.001
  h.Observe(absl::Milliseconds(5));    // <= 0.01
  h.Observe(absl::Milliseconds(10));   // == 0.01
  h.Observe(absl::Milliseconds(100));  // == 0.1
  h.Observe(absl::Seconds(3));         // +Inf only
  h.Observe(absl::Milliseconds(-2));   // a negative duration counts as 0
  const LatencyHistogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<int64_t>{3, 5, 6, 7}));
  EXPECT_EQ(s.count, 7);
  EXPECT_NEAR(s.sum_seconds, 0.0005 + 0.001 + 0.005 + 0.01 + 0.1 + 3, 1e-9);
}

TEST(LatencyHistogramTest, PrometheusTextHasBucketsInfSumAndCount) {
  LatencyHistogram h("tg_x_seconds", "what it measures", {0.0025, 1, 60});
  h.Observe(absl::Milliseconds(2));
  h.Observe(absl::Milliseconds(1500));
  std::string text;
  h.AppendTo(&text);
  EXPECT_NE(text.find("# HELP tg_x_seconds what it measures\n# TYPE tg_x_seconds histogram\n"),
            std::string::npos)
      << text;
  const std::map<std::string, double> m = Samples(text);
  EXPECT_EQ(m, (std::map<std::string, double>{{"tg_x_seconds_bucket{le=\"0.0025\"}", 1},
                                              {"tg_x_seconds_bucket{le=\"1\"}", 1},
                                              {"tg_x_seconds_bucket{le=\"60\"}", 2},
                                              {"tg_x_seconds_bucket{le=\"+Inf\"}", 2},
                                              {"tg_x_seconds_sum", 1.502},
                                              {"tg_x_seconds_count", 2}}))
      << text;
  // The buckets come in increasing order of their bounds, +Inf last.
  EXPECT_LT(text.find("le=\"0.0025\""), text.find("le=\"1\""));
  EXPECT_LT(text.find("le=\"60\""), text.find("le=\"+Inf\""));
}

TEST(LatencyHistogramTest, DefaultBoundsSpanOneMillisecondToSixtySeconds) {
  const std::vector<double> b = LatencyHistogram::DefaultBounds();
  ASSERT_GE(b.size(), 10u);
  EXPECT_DOUBLE_EQ(b.front(), 0.001);
  EXPECT_DOUBLE_EQ(b.back(), 60);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]) << i;
}

TEST(LatencyHistogramTest, ADurationEqualToEachDefaultBoundLandsInThatBucket) {
  const std::vector<double> b = LatencyHistogram::DefaultBounds();
  for (size_t i = 0; i < b.size(); ++i) {
    LatencyHistogram h("t_seconds", "test");
    h.Observe(absl::Nanoseconds(static_cast<int64_t>(b[i] * 1e9 + 0.5)));
    const LatencyHistogram::Snapshot s = h.Read();
    EXPECT_EQ(s.cumulative[i], 1) << "le " << b[i];
    if (i > 0) EXPECT_EQ(s.cumulative[i - 1], 0) << "le " << b[i - 1];
  }
}

TEST(LatencyHistogramTest, ConcurrentObserversLoseNothingAndScrapesStayConsistent) {
  LatencyHistogram h("t_seconds", "test");
  constexpr int kThreads = 8;
  constexpr int kEach = 20000;
  std::atomic<bool> observing{true};
  std::atomic<int> bad_scrapes{0}, scrapes{0};
  std::thread scraper([&] {
    while (observing.load()) {
      const LatencyHistogram::Snapshot s = h.Read();
      bool ok = s.cumulative.back() == s.count;
      for (size_t i = 1; i < s.cumulative.size(); ++i) ok &= s.cumulative[i - 1] <= s.cumulative[i];
      bad_scrapes += !ok;
      ++scrapes;
    }
  });
  std::vector<std::thread> observers;
  for (int t = 0; t < kThreads; ++t) {
    observers.emplace_back([&h, t] {
      // Thread t observes (t + 1) ms, each value in a known bucket.
      for (int i = 0; i < kEach; ++i) h.Observe(absl::Milliseconds(t + 1));
    });
  }
  for (std::thread& t : observers) t.join();
  observing = false;
  scraper.join();
  const LatencyHistogram::Snapshot s = h.Read();
  EXPECT_EQ(s.count, kThreads * kEach);
  // 1..8 ms, kEach each: sum = kEach * 36 ms.
  EXPECT_NEAR(s.sum_seconds, kEach * 0.036, 1e-6);
  // le 0.001: 1 ms; le 0.0025: 1, 2 ms; le 0.005: 1..5 ms; le 0.01: all.
  EXPECT_EQ(s.cumulative[0], kEach);
  EXPECT_EQ(s.cumulative[1], 2 * kEach);
  EXPECT_EQ(s.cumulative[2], 5 * kEach);
  EXPECT_EQ(s.cumulative[3], kThreads * kEach);
  EXPECT_GT(scrapes.load(), 0);
  EXPECT_EQ(bad_scrapes.load(), 0);
}

}  // namespace
}  // namespace tg::serve
