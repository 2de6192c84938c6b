// PeerGrants: one grant per buffer, until the buffer is forgotten. (Connection's use of it,
// one GrantPeerRead per buffer on a real server, is in connection_test.)
#include "client/peer_grants.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

TEST(PeerGrantsTest, ARememberedGrantIsFoundUntilForgotten) {
  PeerGrants grants;
  EXPECT_EQ(grants.Find(1), std::nullopt);
  grants.Remember(1, "g1");
  grants.Remember(2, "g2");
  EXPECT_EQ(grants.Find(1), "g1");
  EXPECT_EQ(grants.Find(2), "g2");
  grants.Remember(1, "g1b");  // a new grant replaces the old.
  EXPECT_EQ(grants.Find(1), "g1b");
  grants.Forget(1);
  EXPECT_EQ(grants.Find(1), std::nullopt);
  EXPECT_EQ(grants.Find(2), "g2");
}

}  // namespace
}  // namespace tg::rpc
