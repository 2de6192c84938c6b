#include "server/host_port.h"

#include "gtest/gtest.h"

namespace tg::server {
namespace {

TEST(HostPortTest, Loopback) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("[::1]"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("10.1.2.3"));
}

TEST(HostPortTest, LoopbackIsParsedNotPrefixMatched) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "127.255.255.254", "::1", "[::1]",
                        "::ffff:127.0.0.1", "LocalHost"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  // Names that only look like loopback: a "127." prefix was once enough.
  for (const char* h : {"127.evil.example", "127.0.0.1.evil.example", "127.", "1270.0.0.1",
                        "128.0.0.1", "::2", "::ffff:10.0.0.1", "", "[::]", "localhost.evil"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
  EXPECT_EQ(IsLoopbackAddress("127.9.9.9"), true);
  EXPECT_EQ(IsLoopbackAddress("10.0.0.1"), false);
  EXPECT_EQ(IsLoopbackAddress("127.evil.example"), std::nullopt);
}

TEST(HostPortTest, Wildcard) {
  for (const char* h : {"", "0.0.0.0", "::", "[::]"}) EXPECT_TRUE(IsWildcardHost(h)) << h;
  for (const char* h : {"127.0.0.1", "::1", "10.0.0.1", "host"})
    EXPECT_FALSE(IsWildcardHost(h)) << h;
}

TEST(HostPortTest, JoinHostPort) {
  EXPECT_EQ(JoinHostPort("::1", 5), "[::1]:5");
  EXPECT_EQ(JoinHostPort("[::1]", 5), "[::1]:5");
  EXPECT_EQ(JoinHostPort("h", 5), "h:5");
}

TEST(HostPortTest, LocalDialHost) {
  EXPECT_EQ(LocalDialHost("0.0.0.0"), "127.0.0.1");
  EXPECT_EQ(LocalDialHost("[::]"), "127.0.0.1");
  EXPECT_EQ(LocalDialHost("[::1]"), "::1");
  EXPECT_EQ(LocalDialHost("10.1.2.3"), "10.1.2.3");
}

}  // namespace
}  // namespace tg::server
