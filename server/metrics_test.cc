// Tests of Metrics' HTTP exposer: it serves the registry at /metrics, and stopping it (as every
// server shutdown does) neither waits out civetweb's 2 s polling round nor leaves the port open.
#include "server/metrics.h"

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/server_test_util.h"

namespace tg::server {
namespace {

TEST(MetricsTest, ExposerServesTheCounters) {
  Metrics m;
  ASSERT_TRUE(m.StartExposer("127.0.0.1", 0).ok());
  ASSERT_GT(m.exposer_port(), 0);
  m.SessionOpened();
  m.UploadBytes(1234);
  const std::string text = testing::ScrapeMetrics(m.exposer_port());
  EXPECT_NE(text.find("\ntg_sessions_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntg_upload_bytes_total 1234\n"), std::string::npos) << text;
}

TEST(MetricsTest, StoppingDoesNotWaitForThePollingRound) {
  for (const char* host : {"127.0.0.1", "0.0.0.0"}) {
    Metrics m;
    ASSERT_TRUE(m.StartExposer(host, 0).ok()) << host;
    const int port = m.exposer_port();
    ASSERT_FALSE(testing::ScrapeMetrics(port).empty()) << host;
    // The listener has just begun a 2 s poll; without the wake-up this takes about 2 s.
    const absl::Time start = absl::Now();
    m.StopExposer();
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << host;
    EXPECT_EQ(m.exposer_port(), 0);
    EXPECT_EQ(testing::ScrapeMetrics(port), "") << host << ": port " << port << " still serves";
  }
}

// "::" is served on every IPv4 address (Debian's civetweb has no IPv6); a specific IPv6 host
// either binds (a civetweb with IPv6) or gets an error that says why and what to do.
TEST(MetricsTest, IPv6Hosts) {
  {
    Metrics m;
    ASSERT_TRUE(m.StartExposer("::", 0).ok());
    EXPECT_FALSE(testing::ScrapeMetrics(m.exposer_port()).empty());
  }
  Metrics m;
  const absl::Status s = m.StartExposer("::1", 0);
  if (s.ok()) GTEST_SKIP() << "this civetweb serves IPv6";
  EXPECT_TRUE(absl::StrContains(s.message(), "[::1]:0")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "no IPv6 support")) << s;
}

TEST(MetricsTest, StopWithoutAnExposerIsANoOp) {
  Metrics m;
  m.StopExposer();
  EXPECT_EQ(m.exposer_port(), 0);
}

}  // namespace
}  // namespace tg::server
