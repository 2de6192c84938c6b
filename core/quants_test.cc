// Round trips and block layouts of every DType (core/quants.h). Bit-exactness with ggml is
// checked separately in ggml_parity_test.cc; here the facts are derived by hand.
#include "core/quants.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

// ---------------------------------------------------------------------------------------------
// Test data

enum class RowKind { kGauss, kUniform, kSmall, kLarge, kPositive, kZeros, kOutlier, kMixed };
constexpr RowKind kAllRowKinds[] = {RowKind::kGauss,   RowKind::kUniform,  RowKind::kSmall,
                                    RowKind::kLarge,   RowKind::kPositive, RowKind::kZeros,
                                    RowKind::kOutlier, RowKind::kMixed};

constexpr EnumName<RowKind> kRowKindNames[] = {
    {RowKind::kGauss, "gauss"},     {RowKind::kUniform, "uniform"},   {RowKind::kSmall, "small"},
    {RowKind::kLarge, "large"},     {RowKind::kPositive, "positive"}, {RowKind::kZeros, "zeros"},
    {RowKind::kOutlier, "outlier"}, {RowKind::kMixed, "mixed"},
};

const char* RowKindName(RowKind kind) { return NameOf(kRowKindNames, kind); }

// A row of n values; every magnitude stays inside the f16 range so that all types apply.
std::vector<float> MakeRow(RowKind kind, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (kind) {
      case RowKind::kGauss:
        x[i] = gauss(rng);
        break;
      case RowKind::kUniform:
        x[i] = uniform(rng);
        break;
      case RowKind::kSmall:
        x[i] = 1e-3f * gauss(rng);
        break;
      case RowKind::kLarge:
        x[i] = 1e3f * gauss(rng);
        break;
      case RowKind::kPositive:
        x[i] = 1.5f + uniform(rng);
        break;
      case RowKind::kZeros:
        x[i] = 0.0f;
        break;
      case RowKind::kOutlier:
        x[i] = gauss(rng);
        break;
      case RowKind::kMixed:  // every 32 values a different decade, 1e-3 .. 1e2.
        x[i] = gauss(rng) * std::pow(10.0f, static_cast<float>((i / 32) % 6) - 3.0f);
        break;
    }
  }
  if (kind == RowKind::kOutlier) x[rng() % n] = (rng() & 1) ? 1000.0f : -1000.0f;
  return x;
}

// Row lengths: 1, 2, 3 and 8 blocks.
std::vector<int64_t> RowLengths(int64_t block_size) {
  return {block_size, 2 * block_size, 3 * block_size, 8 * block_size};
}

// Quantizes and dequantizes through the dispatchers.
std::vector<float> RoundTrip(DType type, const std::vector<float>& x,
                             std::vector<uint8_t>* bytes = nullptr) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(RowBytes(type, n));
  QuantizeRow(type, x.data(), q.data(), n);
  std::vector<float> y(n);
  DequantizeRow(type, q.data(), y.data(), n);
  if (bytes != nullptr) *bytes = std::move(q);
  return y;
}

double Nmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
    ref += double{x[i]} * x[i];
  }
  return ref > 0 ? err / ref : err;
}

// Absolute error bound of storing scale d as f16: half an f16 ulp (2^-11 relative for
// normal halves, 2^-25 absolute below 2^-14).
float HalfRoundingError(float d16) { return std::max(std::fabs(d16) * 0x1p-11f, 0x1p-25f); }

// Runs `check(x, y, bytes)` for every row kind and length of `type`.
template <typename Check>
void ForEachRoundTrip(DType type, Check check) {
  uint32_t seed = 1;
  for (RowKind kind : kAllRowKinds) {
    for (int64_t n : RowLengths(BlockSize(type))) {
      SCOPED_TRACE(testing::Message() << DTypeName(type) << " " << RowKindName(kind) << " n=" << n);
      const std::vector<float> x = MakeRow(kind, n, seed++);
      std::vector<uint8_t> bytes;
      const std::vector<float> y = RoundTrip(type, x, &bytes);
      check(x, y, bytes);
      if (kind == RowKind::kZeros) {
        for (float v : y) ASSERT_EQ(v, 0.0f);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips of the plain types

TEST(QuantsRoundTripTest, F32IsExact) {
  ForEachRoundTrip(DType::kF32, [](const auto& x, const auto& y, const auto& bytes) {
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
    ASSERT_EQ(std::memcmp(x.data(), bytes.data(), bytes.size()), 0);
  });
}

TEST(QuantsRoundTripTest, F16WithinHalfUlp) {
  ForEachRoundTrip(DType::kF16, [](const auto& x, const auto& y, const auto&) {
    for (size_t i = 0; i < x.size(); ++i) {
      // 11 significant bits: half an ulp is 2^-11 relative; subnormals have a fixed 2^-24 ulp.
      const float bound = std::max(std::fabs(x[i]) * 0x1p-11f, 0x1p-25f);
      ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "element " << i << " x=" << x[i];
    }
  });
}

TEST(QuantsRoundTripTest, BF16WithinHalfUlp) {
  ForEachRoundTrip(DType::kBF16, [](const auto& x, const auto& y, const auto&) {
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::fabs(y[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << "element " << i;
    }
  });
}

TEST(QuantsRoundTripTest, I32RoundsToNearest) {
  ForEachRoundTrip(DType::kI32, [](const auto& x, const auto& y, const auto&) {
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(y[i], std::nearbyint(y[i]));
      ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f) << "element " << i;
    }
  });
}

TEST(QuantsRoundTripTest, F16AndBF16ExactValuesSurvive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    for (DType type : {DType::kF16, DType::kBF16}) {
      float f;
      DequantizeRow(type, &bits, &f, 1);
      if (std::isnan(f)) continue;
      uint16_t back;
      QuantizeRow(type, &f, &back, 1);
      ASSERT_EQ(back, bits) << DTypeName(type) << " pattern " << h;
    }
  }
}

TEST(QuantsRoundTripTest, F16RoundingAndSpecials) {
  const float kInf = std::numeric_limits<float>::infinity();
  const float in[] = {1.0f,     1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                      65504.0f, 65519.0f,        65520.0f,
                      kInf,     -kInf,           0x1p-24f,
                      0x1p-25f, -0.0f,           std::nanf("")};
  // 1 + 2^-11 is a tie that goes to the even 1.0; 1 + 3 * 2^-11 goes up to 1 + 2^-9;
  // 65520 is the first value rounding to infinity; 2^-25 is a tie between 0 and 2^-24.
  const uint16_t expected[] = {0x3C00, 0x3C00, 0x3C02, 0x7BFF, 0x7BFF, 0x7C00,
                               0x7C00, 0xFC00, 0x0001, 0x0000, 0x8000, 0x7E00};
  uint16_t out[std::size(in)];
  QuantizeRow(DType::kF16, in, out, std::size(in));
  for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(out[i], expected[i]) << "input " << in[i];
}

TEST(QuantsRoundTripTest, BF16RoundingAndSpecials) {
  const float in[] = {1.0f,
                      1.0f + 0x1p-8f,
                      1.0f + 3 * 0x1p-8f,
                      -2.5f,
                      BitsFloat(0x7F800001u),
                      BitsFloat(0x00018000u),
                      BitsFloat(0x00000001u)};
  // Ties to even as for f16; a signalling NaN becomes quiet; denormals round like any other
  // value instead of being flushed (0x00018000 is a tie going up to the even 0x0002).
  const uint16_t expected[] = {0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7FC0, 0x0002, 0x0000};
  uint16_t out[std::size(in)];
  QuantizeRow(DType::kBF16, in, out, std::size(in));
  for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(out[i], expected[i]) << "element " << i;
}

TEST(QuantsRoundTripTest, I32TiesToEven) {
  const float in[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.49f, -7.51f, 16777216.0f};
  const int32_t expected[] = {0, 2, 2, 0, -2, -2, 2, -8, 16777216};
  int32_t out[std::size(in)];
  QuantizeRow(DType::kI32, in, out, std::size(in));
  for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(out[i], expected[i]) << "input " << in[i];
  float back[std::size(in)];
  DequantizeRow(DType::kI32, expected, back, std::size(in));
  for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(back[i], static_cast<float>(expected[i]));
}

// ---------------------------------------------------------------------------------------------
// Round trips of the quantized types

TEST(QuantsRoundTripTest, Q8_0WithinHalfStep) {
  ForEachRoundTrip(DType::kQ8_0, [](const auto& x, const auto& y, const auto& bytes) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(bytes.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const BlockQ8_0& b = blocks[i / kQK8_0];
      const float d = HalfToFloat(b.d);
      const int q = b.qs[i % kQK8_0];
      ASSERT_LE(std::abs(q), 127);
      // Half a step, plus the error of storing d as f16, which q multiplies.
      const float bound = 0.5f * d + std::abs(q) * HalfRoundingError(d) + 1e-6f * d;
      ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "element " << i;
    }
  });
}

TEST(QuantsRoundTripTest, Q4_0WithinHalfStepExceptClamped) {
  ForEachRoundTrip(DType::kQ4_0, [](const auto& x, const auto& y, const auto& bytes) {
    const auto* blocks = reinterpret_cast<const BlockQ4_0*>(bytes.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float d = HalfToFloat(blocks[i / kQK4_0].d);
      // d = max / -8: the extreme value maps to quant 0 (-8 d), but a value of the opposite
      // sign near |max| would need +8 d, which 4 bits cannot hold; it is clamped to +7 d.
      const bool clamped = d != 0 && x[i] / d > 7.5f;
      const float step = clamped ? std::fabs(d) : 0.5f * std::fabs(d);
      const float bound = step + 8 * HalfRoundingError(d) + 1e-6f * std::fabs(d);
      ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "element " << i << " d=" << d;
    }
  });
}

// Normalized MSE (sum of squared errors / sum of squares) bounds. Measured: on these rows
// the worst is q4_K 6.1e-3, q6_K 5.2e-4; over 2000 random single super-blocks of Gaussian,
// Laplacian and mixed-decade data q4_K averages 5.1e-3 (worst 1.06e-2 for one block) and
// q6_K 3.1e-4 (worst 8.4e-4, tiny values whose f16 super-scale is subnormal).
constexpr double kQ4KMaxNmse = 1e-2;
constexpr double kQ6KMaxNmse = 1e-3;

// Round-trips every test row through `type`, asserting each row's NMSE is below max_nmse, and
// prints the worst.
void ExpectNmseBelow(DType type, double max_nmse) {
  double worst = 0;
  ForEachRoundTrip(type, [&](const auto& x, const auto& y, const auto&) {
    const double nmse = Nmse(x, y);
    worst = std::max(worst, nmse);
    ASSERT_LT(nmse, max_nmse);
  });
  std::printf("%s worst nmse %.3g\n", DTypeName(type), worst);
}

TEST(QuantsRoundTripTest, Q4_KNmse) { ExpectNmseBelow(DType::kQ4_K, kQ4KMaxNmse); }

TEST(QuantsRoundTripTest, Q6_KNmse) { ExpectNmseBelow(DType::kQ6_K, kQ6KMaxNmse); }

// The other types' bounds: the worst row of ForEachRoundTrip as measured (q5_0 3.4e-3,
// q5_1 2.6e-3, q5_K 1.7e-3, q3_K 3.8e-2, q2_K 0.11, iq4_nl 1.1e-2, iq4_xs 8.2e-3, mxfp4
// 5.4e-2; single-block rows of tiny or mixed-decade values are the worst) with 1.5x headroom.
// A layout or scale bug (a swapped nibble half, a wrong scale bit) costs orders of magnitude.
struct NmseBound {
  DType type;
  double max_nmse;
};
constexpr NmseBound kNewTypeBounds[] = {{DType::kQ5_0, 5e-3},      {DType::kQ5_1, 4e-3},
                                        {DType::kQ5_K, 2.5e-3},    {DType::kQ3_K, 6e-2},
                                        {DType::kQ2_K, 0.17},      {DType::kIQ4_NL, 1.7e-2},
                                        {DType::kIQ4_XS, 1.25e-2}, {DType::kMXFP4, 8e-2}};

TEST(QuantsRoundTripTest, NewTypesNmse) {
  for (const NmseBound& b : kNewTypeBounds) ExpectNmseBelow(b.type, b.max_nmse);
}

TEST(QuantsRoundTripTest, Q8_KWithinHalfStepAndBsums) {
  for (RowKind kind : kAllRowKinds) {
    SCOPED_TRACE(RowKindName(kind));
    const int64_t n = 4 * kQK_K;
    const std::vector<float> x = MakeRow(kind, n, 77);
    std::vector<BlockQ8_K> q(n / kQK_K);
    QuantizeRowQ8_K(x.data(), q.data(), n);
    std::vector<float> y(n);
    DequantizeRowQ8_K(q.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const BlockQ8_K& b = q[i / kQK_K];
      ASSERT_LE(std::abs(int{b.qs[i % kQK_K]}), 127);
      ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * std::fabs(b.d) * (1 + 1e-5f)) << "element " << i;
    }
    for (const BlockQ8_K& b : q) {
      for (int g = 0; g < kQK_K / 16; ++g) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b.qs[16 * g + i];
        ASSERT_EQ(b.bsums[g], sum) << "group " << g;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Block layouts, from hand-computed bytes

TEST(QuantsLayoutTest, Q8_0HandBlock) {
  // amax 63.5 gives d = 0.5 (f16 0x3800) and 1/d = 2, so q = roundf(2x): halves round away
  // from zero (0.25 -> 1, 1.25 -> 3), unlike round-to-even.
  const float x[kQK8_0] = {63.5f, -63.5f, 0.25f, -0.25f, 0.75f,  -0.75f, 1.25f, -1.25f,
                           0.0f,  -0.0f,  10.0f, -10.0f, 31.75f, 0.2f,   -0.3f, 5.5f,
                           1.0f,  2.0f,   3.0f,  4.0f,   -1.0f,  -2.0f,  -3.0f, -4.0f,
                           60.0f, -60.0f, 0.5f,  -0.5f,  7.0f,   -7.0f,  0.1f,  -0.1f};
  const int8_t expected_qs[kQK8_0] = {127, -127, 1,   -1,   2,  -2, 3,  -3,  0, 0,  20,
                                      -20, 64,   0,   -1,   11, 2,  4,  6,   8, -2, -4,
                                      -6,  -8,   120, -120, 1,  -1, 14, -14, 0, 0};
  BlockQ8_0 block;
  QuantizeRowQ8_0(x, &block, kQK8_0);
  uint8_t raw[sizeof(BlockQ8_0)];
  std::memcpy(raw, &block, sizeof(raw));
  EXPECT_EQ(raw[0], 0x00);  // d = 0x3800, little endian.
  EXPECT_EQ(raw[1], 0x38);
  for (int j = 0; j < kQK8_0; ++j) {
    EXPECT_EQ(static_cast<int8_t>(raw[2 + j]), expected_qs[j]) << "element " << j;
  }
  float y[kQK8_0];
  DequantizeRowQ8_0(&block, y, kQK8_0);
  for (int j = 0; j < kQK8_0; ++j) EXPECT_EQ(y[j], 0.5f * expected_qs[j]);
}

TEST(QuantsLayoutTest, Q4_0HandBlockNibbleOrder) {
  float x[kQK4_0];
  // x[0] = -8 is the value of largest magnitude: d = -8 / -8 = 1. Elements 1..15 are j - 8,
  // i.e. quants 0..15 (q = trunc(x / d + 8.5)).
  for (int j = 0; j < 16; ++j) x[j] = static_cast<float>(j - 8);
  // Second half: +8 ties |max| but comes later, so it is not the max and clamps to 15 (+7);
  // 0.5 rounds up to 9, -0.5 up to 8, 2.49 down to 10; then 3, 2, ..., -8 give 11, 10, ..., 0.
  x[16] = 8.0f;
  x[17] = 0.5f;
  x[18] = -0.5f;
  x[19] = 2.49f;
  for (int j = 4; j < 16; ++j) x[16 + j] = static_cast<float>(7 - j);
  const uint8_t expected_qs[16] = {0xF0, 0x91, 0x82, 0xA3, 0xB4, 0xA5, 0x96, 0x87,
                                   0x78, 0x69, 0x5A, 0x4B, 0x3C, 0x2D, 0x1E, 0x0F};
  BlockQ4_0 block;
  QuantizeRowQ4_0(x, &block, kQK4_0);
  uint8_t raw[sizeof(BlockQ4_0)];
  std::memcpy(raw, &block, sizeof(raw));
  EXPECT_EQ(raw[0], 0x00);  // d = 1.0 = f16 0x3C00.
  EXPECT_EQ(raw[1], 0x3C);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(raw[2 + j], expected_qs[j]) << "byte " << j;
  float y[kQK4_0];
  DequantizeRowQ4_0(&block, y, kQK4_0);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(y[j], x[j]);
  EXPECT_EQ(y[16], 7.0f);  // clamped.
  EXPECT_EQ(y[17], 1.0f);
  EXPECT_EQ(y[18], 0.0f);
  EXPECT_EQ(y[19], 2.0f);
}

TEST(QuantsLayoutTest, Q4_0PositiveMaxGivesNegativeScale) {
  float x[kQK4_0] = {};
  x[5] = 4.0f;
  x[6] = -2.0f;
  BlockQ4_0 block;
  QuantizeRowQ4_0(x, &block, kQK4_0);
  EXPECT_EQ(block.d, 0xB800);        // d = 4 / -8 = -0.5.
  EXPECT_EQ(block.qs[5] & 0xF, 0);   // 4 / -0.5 = -8 -> quant 0.
  EXPECT_EQ(block.qs[6] & 0xF, 12);  // -2 / -0.5 = 4 -> quant 12.
  EXPECT_EQ(block.qs[0], 0x88);      // zeros are quant 8 in both nibbles.
}

// Sub-block scales and mins of the Q4_K test block, and their 12 packed bytes worked out by
// hand: bytes 0-3 = scale[0..3] | (scale[4..7] >> 4) << 6, bytes 4-7 the same for mins,
// bytes 8-11 = (scale[4..7] & 15) | (min[4..7] & 15) << 4.
constexpr uint8_t kQ4KScales[8] = {1, 2, 3, 63, 17, 33, 48, 5};
constexpr uint8_t kQ4KMins[8] = {0, 4, 8, 63, 16, 32, 49, 1};
constexpr uint8_t kQ4KPacked[12] = {0x41, 0x82, 0xC3, 0x3F, 0x40, 0x84,
                                    0xC8, 0x3F, 0x01, 0x01, 0x10, 0x15};

TEST(QuantsLayoutTest, Q4_KHandBlock) {
  BlockQ4_K block;
  block.d = 0x3C00;     // 1.0
  block.dmin = 0x3800;  // 0.5
  std::memcpy(block.scales, kQ4KPacked, sizeof(kQ4KPacked));
  // qs[32 c + i]: low nibble = element 64 c + i, high nibble = element 64 c + 32 + i.
  for (int k = 0; k < kQK_K / 2; ++k) {
    block.qs[k] = static_cast<uint8_t>((k % 16) | ((15 - k % 16) << 4));
  }
  float y[kQK_K];
  DequantizeRowQ4_K(&block, y, kQK_K);
  for (int e = 0; e < kQK_K; ++e) {
    const int sub = e / 32;
    const int i = e % 32;
    const int q = sub % 2 == 0 ? i % 16 : 15 - i % 16;
    const float expected = 1.0f * kQ4KScales[sub] * q - 0.5f * kQ4KMins[sub];
    ASSERT_EQ(y[e], expected) << "element " << e;
  }
}

// What a Q4_K or Q5_K block holds for element e, straight from the format description: its
// sub-block's 6-bit scale and min, and its low four bits.
struct K4Element {
  int sc;
  int m;
  int low;
};

template <typename Block>
K4Element DecodeK4Element(const Block& b, int e) {
  const int sub = e / 32;
  const uint8_t* s = b.scales;
  const int sc = sub < 4 ? s[sub] & 63 : (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4);
  const int m = sub < 4 ? s[sub + 4] & 63 : (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
  const uint8_t byte = b.qs[32 * (sub / 2) + e % 32];
  return {sc, m, sub % 2 == 0 ? byte & 15 : byte >> 4};
}

// Element e of a Q4_K block decoded straight from the format description.
float DecodeQ4K(const BlockQ4_K& b, int e) {
  const auto [sc, m, q] = DecodeK4Element(b, e);
  return HalfToFloat(b.d) * sc * q - HalfToFloat(b.dmin) * m;
}

// Element e of a Q6_K block: 6-bit quant q (stored + 32) times scale[e / 16] times d. In each
// 128-element half, ql[l] holds elements l (low nibble) and l + 64 (high), ql[l + 32] elements
// l + 32 and l + 96; qh[l] has the top 2 bits of l, l + 32, l + 64, l + 96 at bits 0, 2, 4, 6.
float DecodeQ6K(const BlockQ6_K& b, int e) {
  const int half = e / 128;
  const int r = e % 128;
  const int l = r % 32;
  const int quarter = r / 32;  // 0: l, 1: l + 32, 2: l + 64, 3: l + 96.
  const uint8_t lbyte = b.ql[64 * half + l + (quarter % 2) * 32];
  const int low = quarter < 2 ? lbyte & 15 : lbyte >> 4;
  const int high = (b.qh[32 * half + l] >> (2 * quarter)) & 3;
  return HalfToFloat(b.d) * b.scales[e / 16] * ((low | (high << 4)) - 32);
}

TEST(QuantsLayoutTest, Q6_KHandBlock) {
  BlockQ6_K block;
  std::memset(&block, 0, sizeof(block));
  block.d = 0x3400;  // 0.25
  for (int g = 0; g < 16; ++g) block.scales[g] = static_cast<int8_t>(g - 8);
  // Quant of element e: (7 e) % 64, packed as described above DecodeQ6K.
  for (int e = 0; e < kQK_K; ++e) {
    const int q = (7 * e) % 64;
    const int half = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
    uint8_t& lbyte = block.ql[64 * half + l + (quarter % 2) * 32];
    lbyte |= static_cast<uint8_t>(quarter < 2 ? q & 15 : (q & 15) << 4);
    block.qh[32 * half + l] |= static_cast<uint8_t>((q >> 4) << (2 * quarter));
  }
  float y[kQK_K];
  DequantizeRowQ6_K(&block, y, kQK_K);
  for (int e = 0; e < kQK_K; ++e) {
    ASSERT_EQ(y[e], 0.25f * (e / 16 - 8) * ((7 * e) % 64 - 32)) << "element " << e;
  }
}

TEST(QuantsLayoutTest, KQuantsMatchFormatDescription) {
  const int64_t n = 4 * kQK_K;
  const std::vector<float> x = MakeRow(RowKind::kGauss, n, 5);
  std::vector<BlockQ4_K> q4(n / kQK_K);
  std::vector<BlockQ6_K> q6(n / kQK_K);
  QuantizeRowQ4_K(x.data(), q4.data(), n);
  QuantizeRowQ6_K(x.data(), q6.data(), n);
  std::vector<float> y4(n), y6(n);
  DequantizeRowQ4_K(q4.data(), y4.data(), n);
  DequantizeRowQ6_K(q6.data(), y6.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_FLOAT_EQ(y4[i], DecodeQ4K(q4[i / kQK_K], i % kQK_K)) << "q4_K element " << i;
    ASSERT_FLOAT_EQ(y6[i], DecodeQ6K(q6[i / kQK_K], i % kQK_K)) << "q6_K element " << i;
  }
}

// Element decoders written from the format descriptions in quant_blocks.h, element by element.
float DecodeQ5_0(const BlockQ5_0& b, int e) {
  const int nib = e < 16 ? b.qs[e] & 15 : b.qs[e - 16] >> 4;
  const int high = (b.qh[e / 8] >> (e % 8)) & 1;
  return HalfToFloat(b.d) * ((nib | (high << 4)) - 16);
}

float DecodeQ5_1(const BlockQ5_1& b, int e) {
  const int nib = e < 16 ? b.qs[e] & 15 : b.qs[e - 16] >> 4;
  const int high = (b.qh[e / 8] >> (e % 8)) & 1;
  return HalfToFloat(b.d) * (nib | (high << 4)) + HalfToFloat(b.m);
}

// 2-bit field of element e in a Q2_K/Q3_K qs array: half h = e / 128, r = e % 128; byte
// 32 h + r % 32, bits 2 (r / 32).
int TwoBits(const uint8_t* qs, int e) {
  const int r = e % 128;
  return (qs[32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3;
}

float DecodeQ2K(const BlockQ2_K& b, int e) {
  const int g = e / 16;
  return HalfToFloat(b.d) * (b.scales[g] & 15) * TwoBits(b.qs, e) -
         HalfToFloat(b.dmin) * (b.scales[g] >> 4);
}

float DecodeQ3K(const BlockQ3_K& b, int e) {
  const int g = e / 16;
  const int low4 = g < 8 ? b.scales[g] & 15 : b.scales[g - 8] >> 4;
  const int high2 = (b.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
  const int high_bit = (b.hmask[e % 32] >> (e / 32)) & 1;
  const int q = (TwoBits(b.qs, e) | (high_bit << 2)) - 4;
  return HalfToFloat(b.d) * ((low4 | (high2 << 4)) - 32) * q;
}

float DecodeQ5K(const BlockQ5_K& b, int e) {
  const auto [sc, m, low] = DecodeK4Element(b, e);
  const int high = (b.qh[e % 32] >> (e / 32)) & 1;
  return HalfToFloat(b.d) * sc * (low | (high << 4)) - HalfToFloat(b.dmin) * m;
}

float DecodeIQ4XS(const BlockIQ4_XS& b, int e) {
  const int sub = e / 32, r = e % 32;
  const int low4 = (b.scales_l[sub / 2] >> (4 * (sub % 2))) & 15;
  const int high2 = (b.scales_h >> (2 * sub)) & 3;
  const uint8_t byte = b.qs[16 * sub + r % 16];
  const int idx = r < 16 ? byte & 15 : byte >> 4;
  return HalfToFloat(b.d) * ((low4 | (high2 << 4)) - 32) * kIQ4NLValues[idx];
}

float DecodeIQ4NL(const BlockIQ4_NL& b, int e) {
  const int idx = e < 16 ? b.qs[e] & 15 : b.qs[e - 16] >> 4;
  return HalfToFloat(b.d) * kIQ4NLValues[idx];
}

// E2M1: sign, 2 exponent bits, 1 mantissa bit; times 2^(e - 127).
float DecodeMXFP4(const BlockMXFP4& b, int e) {
  const int code = e < 16 ? b.qs[e] & 15 : b.qs[e - 16] >> 4;
  const int exp = (code >> 1) & 3, mant = code & 1;
  const float mag = exp == 0 ? 0.5f * mant : std::ldexp(1.0f + 0.5f * mant, exp - 1);
  return ((code & 8) ? -mag : mag) * std::ldexp(1.0f, b.e - 127);
}

// Quantized Gaussian rows and random bytes (finite f16 scales) decode as the descriptions say.
template <typename Block, void (*kQuantize)(const float*, Block*, int64_t),
          void (*kDequantize)(const Block*, float*, int64_t)>
void ExpectMatchesDescription(float (*decode)(const Block&, int), int64_t block_size) {
  const int64_t n = 8 * kQK_K;
  std::vector<Block> q(n / block_size);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      const std::vector<float> x = MakeRow(RowKind::kGauss, n, 21);
      kQuantize(x.data(), q.data(), n);
    } else {
      std::mt19937 rng(22);
      auto* raw = reinterpret_cast<uint8_t*>(q.data());
      for (size_t i = 0; i < q.size() * sizeof(Block); ++i) raw[i] = static_cast<uint8_t>(rng());
      // Halves stay finite: clearing bit 14 of every 16-bit word (the top bit of the f16
      // exponent) rules out inf and NaN wherever the scales sit.
      for (size_t w = 0; w + 1 < q.size() * sizeof(Block); w += 2) raw[w + 1] &= 0xBF;
    }
    std::vector<float> y(n);
    kDequantize(q.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = decode(q[i / block_size], static_cast<int>(i % block_size));
      ASSERT_FLOAT_EQ(y[i], want) << "pass " << pass << " element " << i;
    }
  }
}

TEST(QuantsLayoutTest, NewTypesMatchFormatDescription) {
  ExpectMatchesDescription<BlockQ5_0, QuantizeRowQ5_0, DequantizeRowQ5_0>(DecodeQ5_0, kQK5_0);
  ExpectMatchesDescription<BlockQ5_1, QuantizeRowQ5_1, DequantizeRowQ5_1>(DecodeQ5_1, kQK5_1);
  ExpectMatchesDescription<BlockQ2_K, QuantizeRowQ2_K, DequantizeRowQ2_K>(DecodeQ2K, kQK_K);
  ExpectMatchesDescription<BlockQ3_K, QuantizeRowQ3_K, DequantizeRowQ3_K>(DecodeQ3K, kQK_K);
  ExpectMatchesDescription<BlockQ5_K, QuantizeRowQ5_K, DequantizeRowQ5_K>(DecodeQ5K, kQK_K);
  ExpectMatchesDescription<BlockIQ4_NL, QuantizeRowIQ4_NL, DequantizeRowIQ4_NL>(DecodeIQ4NL,
                                                                                kQK4_NL);
  ExpectMatchesDescription<BlockIQ4_XS, QuantizeRowIQ4_XS, DequantizeRowIQ4_XS>(DecodeIQ4XS, kQK_K);
  ExpectMatchesDescription<BlockMXFP4, QuantizeRowMXFP4, DequantizeRowMXFP4>(DecodeMXFP4, kQKMXFP4);
}

TEST(QuantsLayoutTest, MXFP4HandBlock) {
  // amax 5.5: floor(log2 5.5) = 2, so e = 2 - 2 + 127 = 127, scale 2^0 = 1, levels 0, 0.5, 1,
  // 1.5, 2, 3, 4, 6 (codes 0-7, 8-15 negative). 5.0 is a tie between 4 (code 6) and 6
  // (code 7): the first wins. -0.7 -> -0.5 (code 9); 0.25 ties 0 and 0.5 -> 0; 1.8 -> 2
  // (code 4); 5.5 -> 6 (code 7).
  float x[kQKMXFP4] = {};
  x[0] = 5.0f;
  x[1] = -0.7f;
  x[2] = 0.25f;
  x[16] = 1.8f;
  x[17] = 5.5f;
  BlockMXFP4 b;
  QuantizeRowMXFP4(x, &b, kQKMXFP4);
  EXPECT_EQ(b.e, 127);
  EXPECT_EQ(b.qs[0], 0x46);  // element 0 low, element 16 high.
  EXPECT_EQ(b.qs[1], 0x79);
  EXPECT_EQ(b.qs[2], 0x00);
  float y[kQKMXFP4];
  DequantizeRowMXFP4(&b, y, kQKMXFP4);
  EXPECT_EQ(y[0], 4.0f);
  EXPECT_EQ(y[1], -0.5f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[16], 2.0f);
  EXPECT_EQ(y[17], 6.0f);
}

TEST(QuantsLayoutTest, Q6_KZeroBlockIsAllZeroBytes) {
  const std::vector<float> x(kQK_K, 0.0f);
  BlockQ6_K block;
  std::memset(&block, 0xAB, sizeof(block));
  QuantizeRowQ6_K(x.data(), &block, kQK_K);
  const auto* raw = reinterpret_cast<const uint8_t*>(&block);
  for (size_t i = 0; i < sizeof(block); ++i) ASSERT_EQ(raw[i], 0) << "byte " << i;
}

TEST(QuantsLayoutTest, Q4_KScalesFitSixBits) {
  const std::vector<float> x = MakeRow(RowKind::kMixed, kQK_K, 11);
  BlockQ4_K block;
  QuantizeRowQ4_K(x.data(), &block, kQK_K);
  // The largest scale and the largest min of the super-block quantize to 63 exactly.
  int max_sc = 0, max_m = 0;
  for (int sub = 0; sub < 8; ++sub) {
    const uint8_t* s = block.scales;
    max_sc = std::max(max_sc, sub < 4 ? s[sub] & 63 : (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4));
    max_m = std::max(max_m, sub < 4 ? s[sub + 4] & 63 : (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4));
  }
  EXPECT_EQ(max_sc, 63);
  EXPECT_EQ(max_m, 63);
}

// ---------------------------------------------------------------------------------------------
// Dispatchers

class QuantsDispatchTest : public testing::TestWithParam<DType> {};

// Quantizes x with one per-type routine into *bytes and dequantizes them into *y.
template <typename Block, void (*kQuantize)(const float*, Block*, int64_t),
          void (*kDequantize)(const Block*, float*, int64_t)>
void Direct(const std::vector<float>& x, std::vector<uint8_t>* bytes, std::vector<float>* y) {
  const int64_t n = static_cast<int64_t>(x.size());
  kQuantize(x.data(), reinterpret_cast<Block*>(bytes->data()), n);
  kDequantize(reinterpret_cast<const Block*>(bytes->data()), y->data(), n);
}

TEST_P(QuantsDispatchTest, WritesExactlyRowBytes) {
  const DType type = GetParam();
  const int64_t n = 2 * kQK_K;
  const std::vector<float> x = MakeRow(RowKind::kGauss, n, 3);
  const size_t row_bytes = RowBytes(type, n);
  std::vector<uint8_t> q(row_bytes + 64, 0xCD);
  QuantizeRow(type, x.data(), q.data(), n);
  for (size_t i = row_bytes; i < q.size(); ++i) ASSERT_EQ(q[i], 0xCD) << "overrun at " << i;
  std::vector<float> y(n + 16, -1.0f);
  DequantizeRow(type, q.data(), y.data(), n);
  for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(y[i], -1.0f) << "overrun at " << i;
}

// The dispatchers give the same bytes and floats as the per-type routines.
TEST_P(QuantsDispatchTest, MatchesPerTypeRoutines) {
  const DType type = GetParam();
  const int64_t n = 2 * kQK_K;
  const std::vector<float> x = MakeRow(RowKind::kOutlier, n, 8);
  std::vector<uint8_t> via_dispatch(RowBytes(type, n)), direct(RowBytes(type, n));
  QuantizeRow(type, x.data(), via_dispatch.data(), n);
  std::vector<float> y_dispatch(n), y_direct(n);
  DequantizeRow(type, via_dispatch.data(), y_dispatch.data(), n);
  switch (type) {
    case DType::kQ8_0:
      Direct<BlockQ8_0, QuantizeRowQ8_0, DequantizeRowQ8_0>(x, &direct, &y_direct);
      break;
    case DType::kQ4_0:
      Direct<BlockQ4_0, QuantizeRowQ4_0, DequantizeRowQ4_0>(x, &direct, &y_direct);
      break;
    case DType::kQ4_K:
      Direct<BlockQ4_K, QuantizeRowQ4_K, DequantizeRowQ4_K>(x, &direct, &y_direct);
      break;
    case DType::kQ6_K:
      Direct<BlockQ6_K, QuantizeRowQ6_K, DequantizeRowQ6_K>(x, &direct, &y_direct);
      break;
    case DType::kQ5_0:
      Direct<BlockQ5_0, QuantizeRowQ5_0, DequantizeRowQ5_0>(x, &direct, &y_direct);
      break;
    case DType::kQ5_1:
      Direct<BlockQ5_1, QuantizeRowQ5_1, DequantizeRowQ5_1>(x, &direct, &y_direct);
      break;
    case DType::kQ2_K:
      Direct<BlockQ2_K, QuantizeRowQ2_K, DequantizeRowQ2_K>(x, &direct, &y_direct);
      break;
    case DType::kQ3_K:
      Direct<BlockQ3_K, QuantizeRowQ3_K, DequantizeRowQ3_K>(x, &direct, &y_direct);
      break;
    case DType::kQ5_K:
      Direct<BlockQ5_K, QuantizeRowQ5_K, DequantizeRowQ5_K>(x, &direct, &y_direct);
      break;
    case DType::kIQ4_NL:
      Direct<BlockIQ4_NL, QuantizeRowIQ4_NL, DequantizeRowIQ4_NL>(x, &direct, &y_direct);
      break;
    case DType::kIQ4_XS:
      Direct<BlockIQ4_XS, QuantizeRowIQ4_XS, DequantizeRowIQ4_XS>(x, &direct, &y_direct);
      break;
    case DType::kMXFP4:
      Direct<BlockMXFP4, QuantizeRowMXFP4, DequantizeRowMXFP4>(x, &direct, &y_direct);
      break;
    case DType::kF32:
      std::memcpy(direct.data(), x.data(), n * sizeof(float));
      y_direct = x;
      break;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) {
        // Independent element-wise definitions of the plain conversions.
        if (type == DType::kF16) {
          const uint16_t h = FloatToHalf(x[i]);
          std::memcpy(direct.data() + 2 * i, &h, 2);
          y_direct[i] = HalfToFloat(h);
        } else if (type == DType::kBF16) {
          const uint16_t h = FloatToBF16(x[i]);
          std::memcpy(direct.data() + 2 * i, &h, 2);
          y_direct[i] = BF16ToFloat(h);
        } else {
          const auto v = static_cast<int32_t>(std::lrint(x[i]));
          std::memcpy(direct.data() + 4 * i, &v, 4);
          y_direct[i] = static_cast<float>(v);
        }
      }
      break;
  }
  EXPECT_EQ(via_dispatch, direct);
  EXPECT_EQ(std::memcmp(y_dispatch.data(), y_direct.data(), n * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, QuantsDispatchTest, testing::ValuesIn(kAllDTypes),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(QuantsTraitsTest, BlockSizesMatchStructs) {
  // ggml's type sizes (ggml_type_size) and GGUF type ids.
  struct Expected {
    DType type;
    uint32_t id;
    int64_t block_size;
    size_t block_bytes;
  };
  const Expected kExpected[] = {{DType::kQ5_0, 6, 32, 22},      {DType::kQ5_1, 7, 32, 24},
                                {DType::kQ2_K, 10, 256, 84},    {DType::kQ3_K, 11, 256, 110},
                                {DType::kQ5_K, 13, 256, 176},   {DType::kIQ4_NL, 20, 32, 18},
                                {DType::kIQ4_XS, 23, 256, 136}, {DType::kMXFP4, 39, 32, 17}};
  for (const Expected& e : kExpected) {
    EXPECT_EQ(static_cast<uint32_t>(e.type), e.id) << DTypeName(e.type);
    EXPECT_EQ(BlockSize(e.type), e.block_size) << DTypeName(e.type);
    EXPECT_EQ(BlockBytes(e.type), e.block_bytes) << DTypeName(e.type);
    EXPECT_EQ(*DTypeFromId(e.id), e.type);
    EXPECT_EQ(*ParseDType(DTypeName(e.type)), e.type);
  }
  EXPECT_EQ(BlockAlignment(DType::kMXFP4), 1u);
  EXPECT_EQ(BlockAlignment(DType::kQ5_K), 2u);
  EXPECT_EQ(BlockBytes(DType::kQ4_0), sizeof(BlockQ4_0));
  EXPECT_EQ(BlockBytes(DType::kQ8_0), sizeof(BlockQ8_0));
  EXPECT_EQ(BlockBytes(DType::kQ4_K), sizeof(BlockQ4_K));
  EXPECT_EQ(BlockBytes(DType::kQ6_K), sizeof(BlockQ6_K));
  EXPECT_EQ(BlockSize(DType::kQ4_K), kQK_K);
  EXPECT_EQ(BlockSize(DType::kQ8_0), kQK8_0);
}

}  // namespace
}  // namespace tg
