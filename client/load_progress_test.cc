// The progress line: each server's share done and rate over its own time, and the total.
#include "client/load_progress.h"

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

TEST(LoadProgressTest, RatesPerServerAndInAll) {
  // a: 300 of 600 MB after 2 s; b: done, 600 MB in its own 1.5 s; the load runs 2 s.
  const std::vector<ServerProgress> servers = {{"a:1", 300000000, 600000000, 0},
                                               {"b:2", 600000000, 600000000, 1.5}};
  EXPECT_EQ(FormatLoadProgress(servers, 2.0),
            "loading: a:1 50% 150 MB/s | b:2 100% 400 MB/s | all 450 MB/s, 900/1200 MB");
  EXPECT_EQ(FormatLoadProgress({}, 0), "loading: all 0 MB/s, 0/0 MB");
}

}  // namespace
}  // namespace tg::rpc
