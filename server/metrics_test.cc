// Tests of Metrics' HTTP exposer: it serves the registry at /metrics, and stopping it (as every
// server shutdown does) neither waits out civetweb's 2 s polling round nor leaves the port open.
#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/server_testing.h"

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

TEST(MetricsTest, ATokenIsRequiredWhenGiven) {
  Metrics m;
  ASSERT_TRUE(m.StartExposer("127.0.0.1", 0, "s3cret").ok());
  m.SessionOpened();
  for (const std::string& headers : {std::string(), std::string("Authorization: Bearer wrong\r\n"),
                                     std::string("Authorization: Basic czNjcmV0\r\n"),
                                     std::string("Authorization: Bearer s3cret2\r\n")}) {
    const std::string reply = testing::ScrapeMetrics(m.exposer_port(), headers);
    EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 401")) << headers << ": " << reply;
    EXPECT_FALSE(absl::StrContains(reply, "tg_sessions_total")) << headers;
  }
  const std::string reply =
      testing::ScrapeMetrics(m.exposer_port(), "Authorization: Bearer s3cret\r\n");
  EXPECT_TRUE(absl::StrContains(reply, " 200 ")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "\ntg_sessions_total 1\n")) << reply;
  // Another exposer of the process without a token is not affected.
  Metrics open;
  ASSERT_TRUE(open.StartExposer("127.0.0.1", 0).ok());
  EXPECT_TRUE(absl::StrContains(testing::ScrapeMetrics(open.exposer_port()), "tg_sessions_total"));
}

// Connections that open and send nothing (half-open) do not block a scrape: each holds one of
// several workers, and only for the request timeout.
TEST(MetricsTest, HalfOpenConnectionsDoNotBlockAScrape) {
  Metrics m;
  ASSERT_TRUE(m.StartExposer("127.0.0.1", 0).ok());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(m.exposer_port()));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(100));  // the workers have taken them.
  const absl::Time start = absl::Now();
  const std::string text = testing::ScrapeMetrics(m.exposer_port());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(absl::StrContains(text, "tg_sessions_total")) << text;
  for (int fd : idle) close(fd);
}

}  // namespace
}  // namespace tg::server
