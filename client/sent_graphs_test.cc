// SentGraphs: which graph keys a Compute may send alone (the server has the graph).
#include "client/sent_graphs.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

TEST(SentGraphsTest, AKeyIsKnownOnceMarked) {
  SentGraphs graphs;
  EXPECT_FALSE(graphs.MarkSent(42));
  EXPECT_TRUE(graphs.MarkSent(42));
  EXPECT_FALSE(graphs.MarkSent(43));
  EXPECT_TRUE(graphs.MarkSent(42));
}

TEST(SentGraphsTest, OnlyTheMostRecentKeysAreRemembered) {
  SentGraphs graphs;
  for (uint64_t k = 1; k <= SentGraphs::kCapacity; ++k) EXPECT_FALSE(graphs.MarkSent(k));
  EXPECT_TRUE(graphs.MarkSent(1));      // 1 is now the most recent; 2 the oldest.
  EXPECT_FALSE(graphs.MarkSent(1000));  // pushes 2 out.
  EXPECT_FALSE(graphs.MarkSent(2));     // pushes 3 out.
  EXPECT_TRUE(graphs.MarkSent(1));
  EXPECT_TRUE(graphs.MarkSent(4));
  EXPECT_FALSE(graphs.MarkSent(3));
}

TEST(SentGraphsTest, AForgottenKeyIsSentWholeAgain) {
  SentGraphs graphs;
  graphs.MarkSent(7);
  graphs.MarkSent(8);
  graphs.Forget(7);
  EXPECT_FALSE(graphs.MarkSent(7));
  EXPECT_TRUE(graphs.MarkSent(8));
  graphs.Forget(99);  // unknown: nothing happens.
  EXPECT_TRUE(graphs.MarkSent(7));
}

}  // namespace
}  // namespace tg::rpc
