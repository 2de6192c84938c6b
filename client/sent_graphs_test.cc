// SentGraphs: which graph keys a Compute may send alone (the server has the graph).
#include "client/sent_graphs.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "proto/protocol.h"

namespace tg::rpc {
namespace {

TEST(SentGraphsTest, AKeyIsKnownOnceSent) {
  SentGraphs graphs;
  EXPECT_FALSE(graphs.Known(42));
  graphs.Sent(42, 10);
  EXPECT_TRUE(graphs.Known(42));
  EXPECT_FALSE(graphs.Known(43));
  EXPECT_TRUE(graphs.Known(42));
}

// Half the server's count: a key the client still knows is one the server still holds.
TEST(SentGraphsTest, OnlyTheMostRecentGraphsAreRemembered) {
  static_assert(SentGraphs::kMaxGraphs * 2 <= kGraphCacheGraphs);
  SentGraphs graphs;
  for (uint64_t k = 1; k <= SentGraphs::kMaxGraphs; ++k) graphs.Sent(k, 1);
  EXPECT_TRUE(graphs.Known(1));  // 1 is now the most recent; 2 the oldest.
  graphs.Sent(100000, 1);        // pushes 2 out.
  EXPECT_FALSE(graphs.Known(2));
  graphs.Sent(2, 1);  // pushes 3 out.
  EXPECT_TRUE(graphs.Known(1));
  EXPECT_TRUE(graphs.Known(4));
  EXPECT_FALSE(graphs.Known(3));
}

// Half the server's tensors too: big graphs are forgotten sooner.
TEST(SentGraphsTest, TheirTensorsAreBounded) {
  static_assert(SentGraphs::kMaxTensors * 2 <= kGraphCacheTensors);
  SentGraphs graphs;
  const size_t big = kMaxGraphTensors;
  const uint64_t fit = SentGraphs::kMaxTensors / big;
  for (uint64_t k = 1; k <= fit; ++k) graphs.Sent(k, big);
  EXPECT_TRUE(graphs.Known(1));
  graphs.Sent(fit + 1, 1);  // one more tensor than fits: the oldest (2) goes.
  EXPECT_FALSE(graphs.Known(2));
  EXPECT_TRUE(graphs.Known(1));
  EXPECT_TRUE(graphs.Known(fit + 1));
  // Sending a known graph again counts it once.
  graphs.Sent(fit + 1, 1);
  EXPECT_TRUE(graphs.Known(3));
}

TEST(SentGraphsTest, AForgottenKeyIsSentWholeAgain) {
  SentGraphs graphs;
  graphs.Sent(7, 5);
  graphs.Sent(8, 5);
  graphs.Forget(7);
  EXPECT_FALSE(graphs.Known(7));
  EXPECT_TRUE(graphs.Known(8));
  graphs.Forget(99);  // unknown: nothing happens.
  graphs.Sent(7, 5);
  EXPECT_TRUE(graphs.Known(7));
}

}  // namespace
}  // namespace tg::rpc
