// Tests of the CPU MUL_MAT paths added for small models: row-at-a-time float matrix-vector
// products, merged row runs in decode, the packed prefill GEMM of the 32-element block types
// (qgemm.h) and the Q4_0 row-lane tiles, on the stories15M shapes (K = 288, 768) with odd row and
// column counts, against a naive double-precision reference.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/compute_params.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/qgemm.h"
#include "backends/cpu/kernels/vec_dot.h"
#include "core/fp16.h"
#include "core/quants.h"
#include "gtest/gtest.h"
#include "tests/lib/mul_mat_runner.h"
#include "tests/lib/test_util.h"

namespace tg::cpu {
namespace {

using ::tg::testing::Nmse;
using ::tg::testing::RandomFloats;
using ::tg::testing::RunMulMat;

struct Owned {
  Tensor t;
  std::vector<uint8_t> bytes;
};

// Weights [k, m] of `type`, rows row_pad bytes apart beyond their size.
Owned MakeWeights(DType type, int64_t k, int64_t m, uint32_t seed, size_t row_pad = 0) {
  Owned o;
  o.t.type = type;
  o.t.ne[0] = k, o.t.ne[1] = m, o.t.ne[2] = 1, o.t.ne[3] = 1;
  o.t.nb[0] = BlockBytes(type);
  o.t.nb[1] = RowBytes(type, k) + row_pad;
  o.t.nb[2] = o.t.nb[3] = o.t.nb[1] * m;
  o.bytes.resize(o.t.nb[2]);
  o.t.data = o.bytes.data();
  const std::vector<float> v = RandomFloats(k * m, seed);
  for (int64_t r = 0; r < m; ++r) {
    QuantizeRow(type, v.data() + r * k, o.bytes.data() + r * o.t.nb[1], k);
  }
  return o;
}

Owned MakeF32(int64_t k, int64_t n, uint32_t seed) {
  Owned o;
  o.t.type = DType::kF32;
  o.t.ne[0] = k, o.t.ne[1] = n, o.t.ne[2] = 1, o.t.ne[3] = 1;
  SetContiguousStrides(&o.t);
  const std::vector<float> v = RandomFloats(k * n, seed);
  o.bytes.resize(v.size() * sizeof(float));
  std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
  o.t.data = o.bytes.data();
  return o;
}

// Reference: dequantized weights times activations rounded through Q8_0 (32-element block
// types) or Q8_K (256-element super-block types), in double; out[j * m + i].
std::vector<double> Reference(const Tensor& a, const Tensor& b) {
  const int64_t k = a.ne[0], m = a.ne[1], n = b.ne[1];
  std::vector<double> out(m * n);
  std::vector<float> w(k), x(k), y(k);
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(x.data(), static_cast<const char*>(b.data) + j * b.nb[1], k * sizeof(float));
    if (IsQuantized(a.type) && BlockSize(a.type) == kQK8_0) {
      std::vector<BlockQ8_0> q(k / kQK8_0);
      QuantizeRowQ8_0(x.data(), q.data(), k);
      DequantizeRowQ8_0(q.data(), y.data(), k);
    } else if (IsQuantized(a.type) && BlockSize(a.type) == kQK_K) {
      std::vector<BlockQ8_K> q(k / kQK_K);
      QuantizeRowQ8_K(x.data(), q.data(), k);
      DequantizeRowQ8_K(q.data(), y.data(), k);
    } else {
      y = x;
    }
    for (int64_t i = 0; i < m; ++i) {
      DequantizeRow(a.type, static_cast<const char*>(a.data) + i * a.nb[1], w.data(), k);
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += static_cast<double>(w[e]) * y[e];
      out[j * m + i] = s;
    }
  }
  return out;
}

// The product of `a` and `x` (2 threads, weights cached) against the reference, each result
// within `rel` of its magnitude: for weights and activations chosen so that nothing cancels.
void ExpectWithinRelative(Owned& a, Owned& x, double rel) {
  const int64_t rows = a.t.ne[1], n = x.t.ne[1];
  const std::vector<double> want = Reference(a.t, x.t);
  const std::vector<float> got = RunMulMat(&a.t, &x.t, 2, false);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < rows; ++i) {
      const double w = want[j * rows + i];
      EXPECT_NEAR(got[j * rows + i], w, rel * std::fabs(w))
          << n << " columns, column " << j << " row " << i;
    }
  }
}

double Tolerance(DType type) { return IsQuantized(type) ? 1e-9 : 1e-10; }

class MulMatPathsTest : public ::testing::TestWithParam<DType> {};

// Decode-sized products (1-4 columns; float rows one at a time, merged row runs, Q4_0 tiles
// with part of their rows) and prefill-sized ones (17-70 columns; the packed GEMM for the
// 32-element block types with row and column tails), at K = 288 and 768 (9 and 24 blocks);
// decode both in cached tiles of rows and one row at a time (weights from memory).
TEST_P(MulMatPathsTest, StoriesShapesMatchReference) {
  const DType type = GetParam();
  int run = 0;
  for (int64_t k : {288, 768}) {
    if (k % BlockSize(type) != 0) continue;
    for (int64_t m : {1, 15, 16, 33, 250}) {
      for (int64_t n : {1, 2, 4, 17, 70}) {
        for (bool from_memory : {false, true}) {
          const int nth = 1 + run % 3;
          Owned a = MakeWeights(type, k, m, 10 + run);
          Owned b = MakeF32(k, n, 20 + run);
          EXPECT_LT(Nmse(RunMulMat(&a.t, &b.t, nth, from_memory), Reference(a.t, b.t)),
                    Tolerance(type))
              << DTypeName(type) << " K=" << k << " M=" << m << " N=" << n << " threads=" << nth
              << " weights from memory " << from_memory;
          ++run;
        }
      }
    }
  }
}

// Rows padded beyond their size (a strided view): the packed GEMM and the merged row runs
// must follow the row stride.
TEST_P(MulMatPathsTest, PaddedRowsMatchReference) {
  const DType type = GetParam();
  const int64_t k = BlockSize(type) == kQK_K ? 768 : 288;
  for (int64_t n : {1, 3, 40}) {
    Owned a = MakeWeights(type, k, 37, 30 + n, 3 * BlockBytes(type));
    Owned b = MakeF32(k, n, 40 + n);
    EXPECT_LT(Nmse(RunMulMat(&a.t, &b.t, 2), Reference(a.t, b.t)), Tolerance(type))
        << DTypeName(type) << " N=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllWeightTypes, MulMatPathsTest,
    ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                      DType::kQ4_K, DType::kQ6_K, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL,
                      DType::kMXFP4, DType::kQ5_K, DType::kQ3_K, DType::kQ2_K, DType::kIQ4_XS),
    [](const ::testing::TestParamInfo<DType>& info) { return std::string(DTypeName(info.param)); });

// Q4_0 prompts go through the decode tiles (AVX2: no packed GEMM) or a packed GEMM with the
// same arithmetic (AVX-512), and neither's arithmetic per column depends on the other
// columns: a column of a 20-column prefill (AVX2: passes of 8, 8 and 4 columns, rows split
// between 2 threads) gives the bits it gives alone, so a prompt's matrix products do not
// depend on how it is cut into batches. Row counts that are not a multiple of the tiles' 8
// (AVX2) or 16 (AVX-512) rows, rows padded as in a view, weights cached and streamed.
TEST(Q4_0ArithmeticTest, PrefillColumnsAreBitIdenticalToDecode) {
  if (std::string(DotKernelsIsa()) == "scalar") {
    GTEST_SKIP() << "a property of the SIMD kernels (this build: " << DotKernelsIsa() << ")";
  }
  constexpr int64_t kRows = 37, kCols = 20;  // above 16 columns: a prefill.
  int run = 0;
  for (int64_t k : {288, 2048}) {
    for (size_t pad : {size_t{0}, size_t{18}}) {
      for (bool from_memory : {false, true}) {
        Owned a = MakeWeights(DType::kQ4_0, k, kRows, 300 + run, pad);
        Owned x = MakeF32(k, kCols, 400 + run);
        ++run;
        const std::vector<float> prefill = RunMulMat(&a.t, &x.t, 2, from_memory);
        for (int64_t j = 0; j < kCols; ++j) {
          Owned one = MakeF32(k, 1, 0);
          std::memcpy(one.bytes.data(), x.bytes.data() + j * x.t.nb[1], k * sizeof(float));
          const std::vector<float> alone = RunMulMat(&a.t, &one.t, 1 + j % 2, from_memory);
          for (int64_t i = 0; i < kRows; ++i) {
            ASSERT_EQ(std::memcmp(&prefill[j * kRows + i], &alone[i], sizeof(float)), 0)
                << "K=" << k << " pad=" << pad << " from memory " << from_memory << " column " << j
                << " row " << i << ": " << prefill[j * kRows + i] << " in a prefill, " << alone[i]
                << " alone";
          }
        }
      }
    }
  }
}

// Both SIMD Q4_0 kernels compute each result as the sum over blocks, in block order, of
// fma(exact integer block dot, dx * dy) in f32 (vec_dot_q4_0.cc), so that AVX2 and AVX-512
// builds give the same bits. That sum is written out here with std::fma against the reference
// quantizer's activations: decode (1 and 8 columns), a prefill (20: AVX-512's packed GEMM),
// rows that do not fill a tile, weights cached and streamed.
TEST(Q4_0ArithmeticTest, EachResultIsAnInOrderSumOfExactBlockDots) {
  if (std::string(DotKernelsIsa()) == "scalar") {
    GTEST_SKIP() << "a property of the SIMD kernels (this build: scalar)";
  }
  constexpr int64_t kK = 544, kRows = 37;
  constexpr int64_t kBlocks = kK / kQK4_0;
  Owned a = MakeWeights(DType::kQ4_0, kK, kRows, 910);
  for (int64_t n : {1, 8, 20}) {
    Owned x = MakeF32(kK, n, 920 + static_cast<uint32_t>(n));
    std::vector<float> want(kRows * n);
    for (int64_t j = 0; j < n; ++j) {
      std::vector<BlockQ8_0> y(kBlocks);
      QuantizeRowQ8_0(reinterpret_cast<const float*>(x.bytes.data()) + j * kK, y.data(), kK);
      for (int64_t i = 0; i < kRows; ++i) {
        const auto* w = reinterpret_cast<const BlockQ4_0*>(a.bytes.data() + i * a.t.nb[1]);
        float sum = 0;
        for (int64_t b = 0; b < kBlocks; ++b) {
          int32_t dot = 0;
          for (int e = 0; e < kQK4_0 / 2; ++e) {
            dot += ((w[b].qs[e] & 0x0F) - 8) * y[b].qs[e] +
                   ((w[b].qs[e] >> 4) - 8) * y[b].qs[e + kQK4_0 / 2];
          }
          sum = std::fma(static_cast<float>(dot), HalfToFloat(w[b].d) * HalfToFloat(y[b].d), sum);
        }
        want[j * kRows + i] = sum;
      }
    }
    for (bool from_memory : {false, true}) {
      const std::vector<float> got = RunMulMat(&a.t, &x.t, 2, from_memory);
      for (int64_t e = 0; e < kRows * n; ++e) {
        ASSERT_EQ(std::memcmp(&got[e], &want[e], sizeof(float)), 0)
            << n << " columns, from memory " << from_memory << ", column " << e / kRows << " row "
            << e % kRows << ": " << got[e] << ", the in-order sum " << want[e];
      }
    }
  }
}

// The AVX2 tiles add a block's products in 16 bits (8 x 2 x 255 x 8 at most with the
// activations offset by 128). Weights all at q = -8 or all at +7 against activations that
// quantize to +-127 reach those bounds; any saturation would show against the reference.
TEST(Q4_0ArithmeticTest, ExtremeQuantsStayExact) {
  constexpr int64_t kK = 256, kRows = 40;
  Owned a = MakeWeights(DType::kQ4_0, kK, kRows, 900);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t b = 0; b < kK / kQK4_0; ++b) {
      uint8_t* block = a.bytes.data() + r * a.t.nb[1] + b * sizeof(BlockQ4_0);
      const uint16_t one = 0x3C00;  // f16 1.0: no cancellation between blocks.
      std::memcpy(block, &one, sizeof(one));
      std::memset(block + sizeof(one), r % 2 == 0 ? 0x00 : 0xFF, kQK4_0 / 2);
    }
  }
  for (int64_t n : {1, 3, 8, 20}) {
    Owned x = MakeF32(kK, n, 0);
    float* xv = reinterpret_cast<float*>(x.bytes.data());
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < kK; ++i) xv[j * kK + i] = j % 2 == 0 ? 1.0f : -1.0f;
    }
    ExpectWithinRelative(a, x, 1e-5);
  }
}

// MXFP4's scales at the exponents whose halves are subnormal (e = 0, 1) and across the
// normal range, and its largest levels (+-12, doubled): the AVX2 tile computes the scales in
// a vector from the exponent bits and adds 4 products of 24 x 127 in 16 bits. Each row has
// one exponent; its levels share a sign and the activations one per column, so nothing
// cancels and every result is held to 1e-5 relative to the reference.
TEST(MXFP4ArithmeticTest, EveryExponentRangeAndExtremeLevels) {
  constexpr int64_t kK = 256, kRows = 37;
  constexpr uint8_t kExponents[] = {0, 1, 2, 3, 64, 100, 126, 127, 128, 129, 150, 200};
  Owned a = MakeWeights(DType::kMXFP4, kK, kRows, 901);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t b = 0; b < kK / kQKMXFP4; ++b) {
      BlockMXFP4 block;
      block.e = kExponents[r % std::size(kExponents)];
      for (int i = 0; i < kQKMXFP4 / 2; ++i) {
        // Rows of 3: all +12 (nibble 7), all -12 (15), or every level of one sign in turn.
        const int low = r % 3 == 0 ? 7 : r % 3 == 1 ? 15 : (i + b) % 8 + 8 * (r % 2);
        const int high = r % 3 == 2 ? (i + b + 3) % 8 + 8 * (r % 2) : low;
        block.qs[i] = static_cast<uint8_t>(low | high << 4);
      }
      std::memcpy(a.bytes.data() + r * a.t.nb[1] + b * sizeof(BlockMXFP4), &block, sizeof(block));
    }
  }
  for (int64_t n : {1, 3, 8, 20}) {
    Owned x = MakeF32(kK, n, 0);
    float* xv = reinterpret_cast<float*>(x.bytes.data());
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < kK; ++i) {
        // Even columns quantize to +-127 everywhere; odd ones vary along the row.
        const float magnitude = j % 2 == 0 ? 1.0f : static_cast<float>(1 + (i * 7 + j) % 5);
        xv[j * kK + i] = (j % 4 < 2 ? 1.0f : -1.0f) * magnitude;
      }
    }
    ExpectWithinRelative(a, x, 1e-5);
  }
}

// The packed GEMM's tile directly: every row count 1..16 and column count 1..8.
TEST(QGemmTest, TileRowAndColumnCounts) {
  if (!QGemmSupports(DType::kQ8_0)) GTEST_SKIP() << "no packed GEMM in this build";
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL,
                     DType::kMXFP4, DType::kQ4_K, DType::kIQ4_XS}) {
    if (!QGemmSupports(type)) continue;
    const int64_t k = BlockSize(type) == kQK_K ? 2 * kQK_K : 96;
    Owned a = MakeWeights(type, k, kQGemmRows, 50);
    Owned x = MakeF32(k, kQGemmCols, 51);
    const std::vector<double> want = Reference(a.t, x.t);
    std::vector<uint8_t> act(kQGemmCols * QGemmActRowBytes(k));
    for (int j = 0; j < kQGemmCols; ++j) {
      QGemmActFromF32(type, reinterpret_cast<const float*>(x.bytes.data()) + j * k,
                      act.data() + j * QGemmActRowBytes(k), k);
    }
    std::vector<uint8_t> pack_bytes(QGemmPackBytes(k) + 64);
    void* pack =
        reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(pack_bytes.data()) + 63) / 64 * 64);
    for (int rows = 1; rows <= kQGemmRows; ++rows) {
      QGemmPack(type, k, static_cast<const char*>(a.t.data), a.t.nb[1], rows, pack);
      for (int cols = 1; cols <= kQGemmCols; ++cols) {
        std::vector<float> out(kQGemmCols * kQGemmRows, NAN);
        const void* b[kQGemmCols];
        float* c[kQGemmCols];
        for (int j = 0; j < cols; ++j) {
          b[j] = act.data() + j * QGemmActRowBytes(k);
          c[j] = out.data() + j * kQGemmRows;
        }
        QGemmTile(type, k, pack, rows, b, cols, c);
        for (int j = 0; j < kQGemmCols; ++j) {
          for (int i = 0; i < kQGemmRows; ++i) {
            const float v = out[j * kQGemmRows + i];
            if (j < cols && i < rows) {
              EXPECT_NEAR(v, want[j * kQGemmRows + i], 1e-4)
                  << DTypeName(type) << " rows=" << rows << " cols=" << cols;
            } else {
              EXPECT_TRUE(std::isnan(v)) << "wrote outside the tile: row " << i << " col " << j;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tg::cpu
