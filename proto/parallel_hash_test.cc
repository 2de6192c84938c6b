// HashPieces on many threads gives each piece the digest a single sequential SHA-256 gives;
// ParallelForEach runs every index once and stops at the first error.
#include "proto/parallel_hash.h"

#include <atomic>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

TEST(ParallelHashTest, EveryPieceGetsItsOwnDigestOnAnyThreadCount) {
  std::vector<uint8_t> bytes(1 << 20);
  std::mt19937 rng(7);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::vector<FileRange> pieces;
  for (uint64_t off = 0, size = 1; off + size <= bytes.size(); off += size, size = size * 3 + 7) {
    pieces.push_back({off, size});
  }
  pieces.push_back({0, 0});
  for (int threads : {1, 3, 8}) {
    const std::vector<Sha256Digest> got = HashPieces(bytes, pieces, threads);
    ASSERT_EQ(got.size(), pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      Sha256Stream one;  // the reference: a stream fed byte by byte.
      for (uint64_t k = 0; k < pieces[i].size; ++k) one.Update(&bytes[pieces[i].offset + k], 1);
      EXPECT_EQ(got[i], one.Final()) << "piece " << i << ", " << threads << " threads";
    }
  }
}

TEST(ParallelHashTest, ForEachRunsEveryIndexOnceAndStopsAtTheFirstError) {
  std::vector<std::atomic<int>> runs(1000);
  ASSERT_TRUE(ParallelForEach(runs.size(), 4, [&](size_t i) {
                ++runs[i];
                return absl::OkStatus();
              }).ok());
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
  std::atomic<int> after{0};
  const absl::Status s = ParallelForEach(100000, 1, [&](size_t i) {
    if (i == 10) return absl::DataLossError("piece 10");
    if (i > 10) ++after;
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(after.load(), 0);  // one thread: nothing after the failing index.
  EXPECT_EQ(HashThreads(5), 5);
  EXPECT_GE(HashThreads(0), 1);
}

}  // namespace
}  // namespace tg::rpc
