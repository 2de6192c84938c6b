#include "backends/cuda/launch_geometry.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

// How many times a grid-stride loop over `l` visits each of n items (threads walk
// item = thread, thread + total, ...).
std::vector<uint8_t> GridStrideVisits(const Launch& l, int64_t n) {
  std::vector<uint8_t> visits(n, 0);
  const int64_t total = static_cast<int64_t>(l.grid.x) * l.block.x;
  for (int64_t t = 0; t < total; ++t) {
    for (int64_t k = t; k < n; k += total) ++visits[k];
  }
  return visits;
}

bool EveryItemOnce(const std::vector<uint8_t>& visits) {
  for (uint8_t v : visits) {
    if (v != 1) return false;
  }
  return true;
}

TEST(LaunchGeometryTest, ElementwiseCoversOddSizesOnce) {
  for (int64_t n : {1, 2, 31, 255, 256, 257, 1000, 65537}) {
    const Launch l = ElementwiseLaunch(n);
    ASSERT_FALSE(l.empty()) << n;
    EXPECT_EQ(l.block.x, static_cast<uint32_t>(kElementwiseThreads));
    EXPECT_LE(l.grid.x, kMaxElementwiseBlocks);
    EXPECT_TRUE(EveryItemOnce(GridStrideVisits(l, n))) << n;
  }
}

TEST(LaunchGeometryTest, ElementwiseCapsHugeGridsAndSkipsEmptyOnes) {
  EXPECT_TRUE(ElementwiseLaunch(0).empty());
  EXPECT_TRUE(ElementwiseLaunch(-5).empty());
  const Launch huge = ElementwiseLaunch(int64_t{1} << 40);
  EXPECT_EQ(huge.grid.x, kMaxElementwiseBlocks);
  // Past the cap, the grid-stride loop still reaches every item exactly once.
  const int64_t n = kMaxElementwiseBlocks * kElementwiseThreads + 12345;
  const Launch capped = ElementwiseLaunch(n);
  EXPECT_EQ(capped.grid.x, kMaxElementwiseBlocks);
  EXPECT_TRUE(EveryItemOnce(GridStrideVisits(capped, n)));
}

TEST(LaunchGeometryTest, RowThreadsArePowersOfTwoFittingTheRow) {
  struct Case {
    int64_t row_len;
    uint32_t threads;
  };
  for (const Case& c : {Case{1, 32}, Case{31, 32}, Case{32, 32}, Case{33, 64}, Case{100, 128},
                        Case{1024, 1024}, Case{1025, 1024}, Case{1 << 20, 1024}}) {
    const Launch l = RowLaunch(7, c.row_len);
    EXPECT_EQ(l.block.x, c.threads) << c.row_len;
    EXPECT_EQ(l.block.x % kWarpSize, 0u);
    EXPECT_EQ(l.grid.x, 7u);
  }
  EXPECT_TRUE(RowLaunch(0, 100).empty());
  EXPECT_EQ(RowLaunch(int64_t{3} << 31, 8).grid.x, static_cast<uint32_t>(kMaxGridX));
}

TEST(LaunchGeometryTest, WarpLaunchRoundsUnitsUpToWholeBlocks) {
  const Launch l = WarpLaunch(9, 4);
  EXPECT_EQ(l.grid.x, 3u);
  EXPECT_EQ(l.block.x, 128u);
  EXPECT_TRUE(WarpLaunch(0, 4).empty());
}

// Every (row, batch) of a matrix-vector product is computed by exactly its share of warps
// (each part of the row once), with the kernel's own index functions, for every row grouping,
// odd row counts and batch counts past the y limit.
TEST(LaunchGeometryTest, MatVecCoversEveryRowAndBatchOnce) {
  struct Case {
    int64_t m, n_batch;
  };
  for (int rows_per_block : {1, 2, 4}) {
    const int parts = kMatVecWarps / rows_per_block;
    for (const Case& c : {Case{1, 1}, Case{5, 3}, Case{7, 1}, Case{4097, 2}, Case{3, 70001}}) {
      const Launch l = MatVecLaunch(c.m, c.n_batch, rows_per_block);
      ASSERT_FALSE(l.empty());
      EXPECT_LE(l.grid.y, kMaxGridYZ);
      EXPECT_LE(l.grid.z, kMaxGridYZ);
      EXPECT_EQ(l.block.x, static_cast<uint32_t>(kMatVecWarps * kWarpSize));
      std::vector<uint8_t> seen(c.m * c.n_batch * parts, 0);
      for (uint32_t z = 0; z < l.grid.z; ++z) {
        for (uint32_t y = 0; y < l.grid.y; ++y) {
          const int64_t bt = BatchIndex(y, z, l.grid.y);
          for (uint32_t x = 0; x < l.grid.x; ++x) {
            for (int w = 0; w < kMatVecWarps; ++w) {
              const int64_t row = MatVecRow(x, w, rows_per_block);
              if (row >= c.m || bt >= c.n_batch) continue;  // the kernel's idle warps.
              ++seen[(bt * c.m + row) * parts + MatVecRowPart(w, rows_per_block)];
            }
          }
        }
      }
      EXPECT_TRUE(EveryItemOnce(seen)) << c.m << "x" << c.n_batch << " r" << rows_per_block;
    }
  }
}

TEST(LaunchGeometryTest, MatVecRefusesWhatTheGridCannotAddress) {
  EXPECT_TRUE(MatVecLaunch(0, 5, 4).empty());
  EXPECT_TRUE(MatVecLaunch(5, 0, 4).empty());
  EXPECT_TRUE(MatVecLaunch(5, kMaxGridYZ * kMaxGridYZ + 1, 2).empty());
  const Launch edge = MatVecLaunch(5, kMaxGridYZ * kMaxGridYZ, 1);
  EXPECT_EQ(edge.grid.y, static_cast<uint32_t>(kMaxGridYZ));
  EXPECT_EQ(edge.grid.z, static_cast<uint32_t>(kMaxGridYZ));
  EXPECT_EQ(edge.grid.x, 5u);
}

// The staging plan of the quantized matrix-vector kernel: segments of whole blocks that keep
// 16-byte alignment, within the shared-memory budget, covering the row; long rows get more
// warps per row.
TEST(LaunchGeometryTest, MatVecPlanStagesWholeBlocksWithinBudget) {
  const int types[] = {kTypeQ4_0, kTypeQ8_0, kTypeQ4_K, kTypeQ6_K,   kTypeQ5_0,   kTypeQ5_1,
                       kTypeQ2_K, kTypeQ3_K, kTypeQ5_K, kTypeIQ4_NL, kTypeIQ4_XS, kTypeMXFP4};
  for (int type : types) {
    const int64_t bb = BlockBytesOf(type), be = BlockElems(type);
    const int64_t step = MatVecSegmentStep(type);
    EXPECT_EQ(step * bb % 16, 0) << type;  // every segment start stays 16-aligned.
    EXPECT_EQ(step, type == kTypeMXFP4 ? 16 : 8) << type;
    for (int64_t k : {int64_t{256}, int64_t{2048}, int64_t{4096}, int64_t{5632}, int64_t{14336},
                      int64_t{65536}}) {
      for (int n_matrices : {1, 2}) {
        const MatVecPlan p = PlanMatVec(type, k, true, n_matrices);
        const int64_t row_blocks = k / be;
        ASSERT_GT(p.seg_blocks, 0);
        EXPECT_TRUE(p.seg_blocks == row_blocks || p.seg_blocks % step == 0) << type << " " << k;
        EXPECT_LE(p.seg_blocks, row_blocks);
        EXPECT_GE(p.slot_bytes, p.seg_blocks * bb);
        EXPECT_EQ(p.slot_bytes % 16, 0);
        EXPECT_EQ(p.smem_bytes, p.slot_bytes * p.rows_per_block * n_matrices);
        EXPECT_LE(p.smem_bytes, n_matrices * kMatVecStageBytes + 16 * 4 * n_matrices);
        EXPECT_TRUE(p.rows_per_block == 1 || p.rows_per_block == 2 || p.rows_per_block == 4);
        EXPECT_EQ(p.stage_vec, 16);
      }
    }
    EXPECT_EQ(PlanMatVec(type, 4096, false, 1).stage_vec, 2);
  }
  // gpt-oss's MXFP4 expert rows (2880: 90 blocks, 1530 bytes, an even count) fit whole; a
  // long MXFP4 row is cut into segments of 16 blocks (272 bytes) that start 16-byte aligned.
  EXPECT_EQ(PlanMatVec(kTypeMXFP4, 2880, false, 1).seg_blocks, 90);
  const MatVecPlan long_mxfp4 = PlanMatVec(kTypeMXFP4, 65536, true, 1);
  EXPECT_LT(long_mxfp4.seg_blocks, 65536 / 32);
  EXPECT_EQ(long_mxfp4.seg_blocks % 16, 0);
  EXPECT_EQ(long_mxfp4.slot_bytes % 16, 0);
  EXPECT_GE(long_mxfp4.slot_bytes, long_mxfp4.seg_blocks * 17);
  // A decode row of 4096 Q4_0 weights: one warp per row (4 units per lane); the FFN's down
  // projection (14336) and a 64K row spread over more warps.
  EXPECT_EQ(PlanMatVec(kTypeQ4_0, 4096, true, 1).rows_per_block, 4);
  EXPECT_LT(PlanMatVec(kTypeQ4_0, 14336, true, 1).rows_per_block, 4);
  EXPECT_EQ(PlanMatVec(kTypeQ4_0, 65536, true, 1).rows_per_block, 1);
  // Float weights are read directly: nothing staged.
  const MatVecPlan f = PlanMatVec(kTypeF16, 4096, true, 1);
  EXPECT_EQ(f.seg_blocks, 0);
  EXPECT_EQ(f.smem_bytes, 0);
  EXPECT_EQ(f.stage_vec, 16);
  // Rows that do not allow 16-byte loads (K = 257 f32: rows 4-byte aligned; or K % 8 != 0,
  // which a vector loop without a tail would cut short) are read one element at a time.
  for (int type : {kTypeF32, kTypeF16, kTypeBF16}) {
    EXPECT_EQ(PlanMatVec(type, 257, false, 1).stage_vec, 2) << type;
  }
}

TEST(LaunchGeometryTest, FlashAttnHasOneBlockPerRow) {
  EXPECT_EQ(FlashAttnLaunch(37).grid.x, 37u);
  EXPECT_EQ(FlashAttnLaunch(37).block.x, static_cast<uint32_t>(kFlashAttnThreads));
  EXPECT_TRUE(FlashAttnLaunch(0).empty());
  EXPECT_EQ(FlashAttnLaunch(int64_t{1} << 40).grid.x, static_cast<uint32_t>(kMaxGridX));
}

}  // namespace
}  // namespace tg::cuda
