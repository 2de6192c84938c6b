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
