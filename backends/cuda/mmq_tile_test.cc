// The int8 tile product's shared code (mmq_tile.h) on the host: every quantized group
// unpacks to values equal to core's dequantization; the per-group update over int8 dot
// products reproduces an f64 product of the dequantized weights and activations; the mma
// fragment layouts cover their matrices exactly once, load as aligned words, and the sm_75
// instruction shapes are exact halves of the sm_80 ones.
#include "backends/cuda/mmq_tile.h"

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quants.h"
#include "gtest/gtest.h"
#include "tests/lib/test_util.h"

namespace tg::cuda {
namespace {

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ8_0,   DType::kQ4_K,   DType::kQ6_K,
                            DType::kQ5_0, DType::kQ5_1,   DType::kQ2_K,   DType::kQ3_K,
                            DType::kQ5_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

std::vector<uint8_t> QuantizedRow(DType type, int64_t k, uint32_t seed) {
  const std::vector<float> x = tg::testing::RandomFloats(k, seed, -2.0f, 2.0f);
  std::vector<uint8_t> out(RowBytes(type, k));
  QuantizeRow(type, x.data(), out.data(), k);
  return out;
}

int8_t Byte(const uint32_t q[8], int j) {
  return static_cast<int8_t>(static_cast<uint8_t>(q[j / 4] >> (8 * (j % 4))));
}

TEST(MmqTileTest, UnpackedGroupsEqualTheDequantizedWeights) {
  constexpr int64_t kK = 512;
  for (DType type : kTypes) {
    const int t = static_cast<int>(type);
    for (uint32_t seed : {1u, 2u, 3u}) {
      const std::vector<uint8_t> row = QuantizedRow(type, kK, seed);
      const char* p = reinterpret_cast<const char*>(row.data());
      for (int64_t g = 0; g < kK / 32; ++g) {
        uint32_t q[8];
        const GroupScales s = UnpackGroup32(t, p, g, q);
        for (int j = 0; j < 32; ++j) {
          const float want = DequantAt(t, p, 32 * g + j);
          const float got = j < 16 ? s.lo * Byte(q, j) - s.min : s.hi * Byte(q, j) - s.min_hi;
          ASSERT_NEAR(got, want, 1e-6f * (1.0f + std::fabs(want)))
              << DTypeName(type) << " group " << g << " value " << j;
        }
      }
    }
  }
}

TEST(MmqTileTest, UnpackedQuantsStayInTheirTypesRange) {
  // The tile's int8 dot products are exact only if every value fits: Q4_0 -8..7, Q4_K
  // 0..15, Q6_K -32..31, ..., Q8_0 any int8.
  const std::pair<DType, std::pair<int, int>> ranges[] = {
      {DType::kQ4_0, {-8, 7}},       {DType::kQ4_K, {0, 15}},   {DType::kQ6_K, {-32, 31}},
      {DType::kQ5_0, {-16, 15}},     {DType::kQ5_1, {0, 31}},   {DType::kQ5_K, {0, 31}},
      {DType::kQ3_K, {-4, 3}},       {DType::kQ2_K, {0, 3}},    {DType::kIQ4_NL, {-127, 113}},
      {DType::kIQ4_XS, {-127, 113}}, {DType::kMXFP4, {-12, 12}}};
  std::mt19937 rng(5);
  for (const auto& [type, range] : ranges) {
    std::vector<uint8_t> row(RowBytes(type, 256));
    for (uint8_t& b : row) b = static_cast<uint8_t>(rng());  // every bit pattern of quants.
    for (int64_t g = 0; g < 256 / 32; ++g) {
      uint32_t q[8];
      UnpackGroup32(static_cast<int>(type), reinterpret_cast<const char*>(row.data()), g, q);
      for (int j = 0; j < 32; ++j) {
        EXPECT_GE(Byte(q, j), range.first);
        EXPECT_LE(Byte(q, j), range.second);
      }
    }
  }
}

// out[r, c] over groups: int dot products of unpacked weights and Q8_1 activations, as the
// kernel's tensor cores form them, then GroupUpdate.
TEST(MmqTileTest, GroupUpdatesReproduceTheProduct) {
  constexpr int64_t kK = 768, kRows = 5, kCols = 3;
  for (DType type : kTypes) {
    const int t = static_cast<int>(type);
    std::vector<std::vector<uint8_t>> w;
    for (int r = 0; r < kRows; ++r) w.push_back(QuantizedRow(type, kK, 10 + r));
    std::vector<std::vector<BlockQ8_1>> act(kCols, std::vector<BlockQ8_1>(kK / 32));
    for (int c = 0; c < kCols; ++c) {
      const std::vector<float> x = tg::testing::RandomFloats(kK, 50 + c, -1.0f, 1.0f);
      QuantizeActRow(t, x.data(), act[c].data(), kK);
    }
    for (int r = 0; r < kRows; ++r) {
      const char* p = reinterpret_cast<const char*>(w[r].data());
      for (int c = 0; c < kCols; ++c) {
        float got = 0.0f;
        double want = 0.0, scale = 0.0;
        for (int64_t g = 0; g < kK / 32; ++g) {
          uint32_t q[8];
          const GroupScales s = UnpackGroup32(t, p, g, q);
          const BlockQ8_1& a = act[c][g];
          int lo = 0, hi = 0, sum_hi = 0;
          for (int j = 0; j < 32; ++j) (j < 16 ? lo : hi) += Byte(q, j) * a.qs[j];
          for (int j = 16; j < 32; ++j) sum_hi += a.qs[j];
          got += GroupUpdateOf(t, lo, hi, s, a.d, a.sum, sum_hi);
          for (int j = 0; j < 32; ++j) {
            const double term = static_cast<double>(DequantAt(t, p, 32 * g + j)) * a.d * a.qs[j];
            want += term;
            scale += std::fabs(term);
          }
        }
        ASSERT_NEAR(got, want, 1e-5 * scale + 1e-6) << DTypeName(type) << " " << r << "," << c;
      }
    }
  }
}

// Each lane's elements of a fragment, as (row, col); every element of a rows x cols matrix
// must be held exactly once.
template <typename Fn>
void ExpectCovers(int rows, int cols, int regs, int per_reg, Fn at) {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < regs; ++r) {
      for (int i = 0; i < per_reg; ++i) {
        const RowCol rc = at(lane, r, i);
        ASSERT_GE(rc.row, 0);
        ASSERT_LT(rc.row, rows);
        ASSERT_GE(rc.col, 0);
        ASSERT_LT(rc.col, cols);
        EXPECT_TRUE(seen.insert({rc.row, rc.col}).second) << lane << " " << r << " " << i;
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(rows * cols));
}

TEST(MmqTileTest, FragmentsCoverTheirMatricesOnce) {
  ExpectCovers(16, 16, 2, 4, [](int l, int r, int i) { return MmaS8A(l, r, i); });
  ExpectCovers(16, 8, 1, 4, [](int l, int, int i) { return MmaS8B(l, i); });
  ExpectCovers(8, 16, 1, 4, [](int l, int, int i) { return MmaS8A8(l, i); });
  ExpectCovers(16, 16, 4, 2, [](int l, int r, int h) { return MmaF16A(l, r, h); });
  ExpectCovers(16, 8, 2, 2, [](int l, int r, int h) { return MmaF16B(l, r, h); });
  ExpectCovers(16, 8, 2, 2, [](int l, int r, int h) { return MmaF16A8(l, r, h); });
  ExpectCovers(8, 8, 1, 2, [](int l, int, int h) { return MmaF16B8(l, h); });
  ExpectCovers(16, 8, 1, 4, [](int l, int, int i) { return MmaC(l, i); });
}

TEST(MmqTileTest, RegistersLoadAsAlignedWordsAlongK) {
  // The kernels fill a register with one 32-bit shared-memory load: its bytes (int8) or
  // halves (f16) must be consecutive along K, starting on a word.
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 2; ++r) {
      const RowCol a0 = MmaS8A(lane, r, 0);
      EXPECT_EQ(a0.col % 4, 0);
      for (int i = 1; i < 4; ++i) {
        EXPECT_EQ(MmaS8A(lane, r, i).row, a0.row);
        EXPECT_EQ(MmaS8A(lane, r, i).col, a0.col + i);
        EXPECT_EQ(MmaS8B(lane, i).row, MmaS8B(lane, 0).row + i);  // K runs along a B column.
      }
    }
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(MmaF16A(lane, r, 0).col % 2, 0);
      EXPECT_EQ(MmaF16A(lane, r, 1).col, MmaF16A(lane, r, 0).col + 1);
    }
    for (int r = 0; r < 2; ++r) EXPECT_EQ(MmaF16B(lane, r, 1).row, MmaF16B(lane, r, 0).row + 1);
  }
}

TEST(MmqTileTest, Sm75ShapesAreHalvesOfTheSm80Ones) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      // int8 m16n8k16 = m8n8k16 on rows 0..7 (register 0) and on rows 8..15 (register 1).
      EXPECT_EQ(MmaS8A(lane, 0, i).row, MmaS8A8(lane, i).row);
      EXPECT_EQ(MmaS8A(lane, 1, i).row, MmaS8A8(lane, i).row + 8);
      EXPECT_EQ(MmaS8A(lane, 1, i).col, MmaS8A8(lane, i).col);
      // ... whose accumulators are elements 0..1 and 2..3 of the m16n8 one.
      EXPECT_EQ(MmaC(lane, i).row, MmaC(lane, i % 2).row + 8 * (i / 2));
    }
    for (int h = 0; h < 2; ++h) {
      // f16 m16n8k16 = m16n8k8 on K 0..7 (registers 0, 1; B 0) and 8..15 (2, 3; B 1).
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(MmaF16A(lane, r, h).row, MmaF16A8(lane, r, h).row);
        EXPECT_EQ(MmaF16A(lane, r, h).col, MmaF16A8(lane, r, h).col);
        EXPECT_EQ(MmaF16A(lane, r + 2, h).row, MmaF16A8(lane, r, h).row);
        EXPECT_EQ(MmaF16A(lane, r + 2, h).col, MmaF16A8(lane, r, h).col + 8);
        EXPECT_EQ(MmaF16B(lane, r, h).row, MmaF16B8(lane, h).row + 8 * r);
        EXPECT_EQ(MmaF16B(lane, r, h).col, MmaF16B8(lane, h).col);
      }
    }
  }
}

}  // namespace
}  // namespace tg::cuda
