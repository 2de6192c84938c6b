// The numerics the CUDA kernels run (quant_math.h), checked on the host against core's
// reference quantizers and dequantizers: the same functions execute on the device.
#include "backends/cuda/quant_math.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quants.h"
#include "gtest/gtest.h"
#include "tests/lib/test_util.h"

namespace tg::cuda {
namespace {

constexpr DType kQuantTypes[] = {DType::kQ4_0, DType::kQ8_0,   DType::kQ4_K,   DType::kQ6_K,
                                 DType::kQ5_0, DType::kQ5_1,   DType::kQ2_K,   DType::kQ3_K,
                                 DType::kQ5_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

// MXFP4 exponents of random blocks stay below this, so that products stay finite (the
// exponent's every value is checked on its own by E8M0HalfMatchesCore).
constexpr int kMaxRandomExponent = 160;

std::vector<uint8_t> Quantize(DType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(RowBytes(type, static_cast<int64_t>(x.size())));
  QuantizeRow(type, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Random bytes for every block, with finite scales: every bit pattern of quants and of the
// packed scales (6-bit Q4_K/Q5_K/Q3_K/IQ4_XS, 4-bit Q2_K) occurs.
std::vector<uint8_t> RandomBlocks(DType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(RowBytes(type, n));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.5f, 0.5f);
  const size_t bb = BlockBytes(type);
  for (size_t off = 0; off < bytes.size(); off += bb) {
    const uint16_t d = FloatToHalf(scale(rng)), dmin = FloatToHalf(scale(rng));
    switch (type) {
      case DType::kQ4_K:
      case DType::kQ5_K:
      case DType::kQ5_1:  // its m.
        std::memcpy(&bytes[off + 2], &dmin, 2);
        [[fallthrough]];
      case DType::kQ4_0:
      case DType::kQ5_0:
      case DType::kQ8_0:
      case DType::kIQ4_NL:
      case DType::kIQ4_XS:
        std::memcpy(&bytes[off], &d, 2);
        break;
      case DType::kQ6_K:
      case DType::kQ3_K:
        std::memcpy(&bytes[off + bb - 2], &d, 2);
        break;
      case DType::kQ2_K:
        std::memcpy(&bytes[off + bb - 4], &d, 2);
        std::memcpy(&bytes[off + bb - 2], &dmin, 2);
        break;
      case DType::kMXFP4:
        bytes[off] = static_cast<uint8_t>(bytes[off] % kMaxRandomExponent);
        break;
      default:
        break;
    }
  }
  return bytes;
}

// Blocks of n values of `type`: quantized from random floats (variant 0), or random bytes.
std::vector<uint8_t> TestBlocks(DType type, int64_t n, int variant, uint32_t seed) {
  return variant == 0 ? Quantize(type, testing::RandomFloats(n, seed, -3.0f, 3.0f))
                      : RandomBlocks(type, n, seed);
}

// Dequantized values of a row of `type`, as core computes them.
std::vector<float> CoreDequantized(DType type, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> out(n);
  DequantizeRow(type, q.data(), out.data(), n);
  return out;
}

// A row of every quantized type, quantized from random floats (variant 0) or random bytes
// (variant 1): TestBlocks of the parameters.
class QuantRowTest : public ::testing::TestWithParam<std::tuple<DType, int>> {
 protected:
  DType type() const { return std::get<0>(GetParam()); }
  int variant() const { return std::get<1>(GetParam()); }
  std::vector<uint8_t> Blocks(int64_t n, uint32_t seed) const {
    return TestBlocks(type(), n, variant(), seed);
  }
};

INSTANTIATE_TEST_SUITE_P(AllQuantTypes, QuantRowTest,
                         ::testing::Combine(::testing::ValuesIn(kQuantTypes),
                                            ::testing::Values(0, 1)),
                         [](const ::testing::TestParamInfo<QuantRowTest::ParamType>& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == 0 ? "_quantized" : "_random_bytes");
                         });

TEST_P(QuantRowTest, DequantAtMatchesCoreDequantizeRowBitForBit) {
  constexpr int64_t kN = 1024;
  const std::vector<uint8_t> q = Blocks(kN, 11);
  const std::vector<float> want = CoreDequantized(type(), q, kN);
  for (int64_t i = 0; i < kN; ++i) {
    const float got =
        DequantAt(static_cast<int>(type()), reinterpret_cast<const char*>(q.data()), i);
    ASSERT_TRUE(SameBits(got, want[i])) << "element " << i << ": " << got << " vs " << want[i];
  }
}

std::vector<std::vector<float>> QuantizerInputs(int64_t n) {
  std::vector<std::vector<float>> rows;
  rows.push_back(testing::RandomFloats(n, 21, -2.0f, 2.0f));
  rows.push_back(std::vector<float>(n, 0.0f));
  std::vector<float> ties(n);
  for (int64_t i = 0; i < n; ++i)
    ties[i] = (i % 32 == 0) ? 127.0f : 0.5f * static_cast<float>(i % 7) - 1.5f;
  rows.push_back(ties);  // d = 1: every x * id lies on a half or a whole.
  std::vector<float> negmax = testing::RandomFloats(n, 22, -1.0f, 1.0f);
  for (int64_t i = 0; i < n; i += 32) negmax[i + 5] = -4.0f, negmax[i + 9] = 4.0f;
  rows.push_back(negmax);  // ties of magnitude: the first one sets the sign.
  return rows;
}

TEST(QuantMathTest, KernelQuantizersMatchCoreBitForBit) {
  constexpr int64_t kN = 256;
  for (const std::vector<float>& x : QuantizerInputs(kN)) {
    std::vector<uint8_t> want8 = Quantize(DType::kQ8_0, x), want4 = Quantize(DType::kQ4_0, x);
    std::vector<BlockQ8_0> got8(kN / kQK8_0);
    std::vector<BlockQ4_0> got4(kN / kQK4_0);
    for (int64_t b = 0; b < kN / 32; ++b) {
      QuantizeBlockQ8_0Ref(x.data() + 32 * b, &got8[b]);
      QuantizeBlockQ4_0Ref(x.data() + 32 * b, &got4[b]);
    }
    EXPECT_EQ(std::memcmp(got8.data(), want8.data(), want8.size()), 0);
    EXPECT_EQ(std::memcmp(got4.data(), want4.data(), want4.size()), 0);
  }
}

// The Q8_1 activations hold exactly the integers and scales of the CPU's activation formats:
// Q8_0 blocks for Q4_0/Q8_0 weights, Q8_K super-blocks for the k-quants.
TEST(QuantMathTest, ActivationBlocksCarryTheCpuFormatsValues) {
  constexpr int64_t kN = 512;
  for (const std::vector<float>& x : QuantizerInputs(kN)) {
    std::vector<BlockQ8_0> q80(kN / 32);
    QuantizeRowQ8_0(x.data(), q80.data(), kN);
    std::vector<BlockQ8_1> act(kN / 32);
    QuantizeActRow(kTypeQ4_0, x.data(), act.data(), kN);
    for (int64_t b = 0; b < kN / 32; ++b) {
      EXPECT_EQ(std::memcmp(act[b].qs, q80[b].qs, 32), 0) << "block " << b;
      EXPECT_TRUE(SameBits(act[b].d, HalfToFloat(q80[b].d))) << "block " << b;
      int sum = 0;
      for (int8_t q : act[b].qs) sum += q;
      EXPECT_EQ(act[b].sum, sum);
    }
    std::vector<BlockQ8_K> q8k(kN / kQK_K);
    QuantizeRowQ8_K(x.data(), q8k.data(), kN);
    QuantizeActRow(kTypeQ6_K, x.data(), act.data(), kN);
    for (int64_t b = 0; b < kN / 32; ++b) {
      const BlockQ8_K& k = q8k[b / 8];
      EXPECT_EQ(std::memcmp(act[b].qs, k.qs + 32 * (b % 8), 32), 0) << "block " << b;
      EXPECT_TRUE(SameBits(act[b].d, k.d)) << "block " << b << ": " << act[b].d << " vs " << k.d;
      EXPECT_EQ(act[b].sum, k.bsums[2 * (b % 8)] + k.bsums[2 * (b % 8) + 1]);
    }
  }
}

// Unit u of a weight row dotted with activation block u: quant_math.h's UnitDot, which
// matvec.cu runs.
float UnitDotOf(DType type, const uint8_t* w, int64_t u, const BlockQ8_1& a) {
  const char* p = reinterpret_cast<const char*>(w);
  switch (type) {
    case DType::kQ4_0:
      return UnitDot<kTypeQ4_0>(p, u, a);
    case DType::kQ8_0:
      return UnitDot<kTypeQ8_0>(p, u, a);
    case DType::kQ4_K:
      return UnitDot<kTypeQ4_K>(p, u, a);
    case DType::kQ6_K:
      return UnitDot<kTypeQ6_K>(p, u, a);
    case DType::kQ5_0:
      return UnitDot<kTypeQ5_0>(p, u, a);
    case DType::kQ5_1:
      return UnitDot<kTypeQ5_1>(p, u, a);
    case DType::kQ2_K:
      return UnitDot<kTypeQ2_K>(p, u, a);
    case DType::kQ3_K:
      return UnitDot<kTypeQ3_K>(p, u, a);
    case DType::kQ5_K:
      return UnitDot<kTypeQ5_K>(p, u, a);
    case DType::kIQ4_NL:
      return UnitDot<kTypeIQ4_NL>(p, u, a);
    case DType::kIQ4_XS:
      return UnitDot<kTypeIQ4_XS>(p, u, a);
    case DType::kMXFP4:
      return UnitDot<kTypeMXFP4>(p, u, a);
    default:
      return std::numeric_limits<float>::quiet_NaN();
  }
}

// Each 32-element dot equals the f64 dot of the dequantized weights (core's dequantizer)
// with the dequantized activations, to float rounding: a wrong nibble, scale or offset
// would be off by far more.
TEST_P(QuantRowTest, BlockDotsMatchTheDequantizedProducts) {
  constexpr int64_t kN = 2048;
  const std::vector<uint8_t> w = Blocks(kN, 31);
  const std::vector<float> wf = CoreDequantized(type(), w, kN);
  const std::vector<float> x = testing::RandomFloats(kN, 33, -2.0f, 2.0f);
  std::vector<BlockQ8_1> a(kN / 32);
  QuantizeActRow(static_cast<int>(type()), x.data(), a.data(), kN);
  for (int64_t u = 0; u < kN / 32; ++u) {
    double want = 0.0, scale = 0.0;
    for (int j = 0; j < 32; ++j) {
      const double p = static_cast<double>(wf[32 * u + j]) * a[u].qs[j] * a[u].d;
      want += p;
      scale += std::fabs(p);
    }
    const float got = UnitDotOf(type(), w.data(), u, a[u]);
    ASSERT_NEAR(got, want, 1e-5 * scale + 1e-30) << "unit " << u;
  }
}

// Each weight type's activations use the scale group of the CPU's format for that type
// (backends/cpu/kernels/vec_dot.h): Q8_0 for the 32-element types, Q8_K for the rest.
TEST_P(QuantRowTest, ActivationGroupIsTheCpuFormats) {
  EXPECT_EQ(ActGroup(static_cast<int>(type())), BlockSize(type()) == kQK_K ? kQK_K : 32);
}

// The packed tables and the byte-permute lookup hold quant_blocks.h's levels.
TEST(QuantMathTest, TableLookupsMatchTheLevels) {
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(TableAt(IQ4NLTable(), i), kIQ4NLValues[i]) << i;
    EXPECT_EQ(TableAt(MXFP4Table(), i), kMXFP4Values[i]) << i;
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 1000; ++trial) {
    const uint32_t nibbles = static_cast<uint32_t>(rng()) & 0x0F0F0F0Fu;
    const uint32_t iq4 = Lookup4(nibbles, IQ4NLTable()), fp4 = Lookup4(nibbles, MXFP4Table());
    for (int n = 0; n < 4; ++n) {
      const int idx = (nibbles >> (8 * n)) & 0xF;
      EXPECT_EQ(static_cast<int8_t>(iq4 >> (8 * n)), kIQ4NLValues[idx]);
      EXPECT_EQ(static_cast<int8_t>(fp4 >> (8 * n)), kMXFP4Values[idx]);
    }
  }
}

TEST(QuantMathTest, E8M0HalfMatchesCore) {
  for (int e = 0; e < 256; ++e) {
    EXPECT_TRUE(
        SameBits(E8M0Half(static_cast<uint8_t>(e)), E8M0ToFloatHalf(static_cast<uint8_t>(e))))
        << e;
  }
}

TEST(QuantMathTest, PlainConversionsMatchCore) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToF32(static_cast<uint16_t>(h));
    ASSERT_TRUE(SameBits(f, HalfToFloat(static_cast<uint16_t>(h))) || (std::isnan(f))) << h;
  }
  std::vector<float> x = testing::RandomFloats(4096, 41, -70000.0f, 70000.0f);
  x.insert(x.end(), {0.0f, -0.0f, 1e-8f, 65519.0f, 65520.0f, std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::quiet_NaN(), 1.00390625f, 1.01171875f});
  for (float v : x) {
    EXPECT_EQ(F32ToHalf(v), FloatToHalf(v)) << v;
    EXPECT_EQ(F32ToBF16(v), FloatToBF16(v)) << v;
    EXPECT_TRUE(SameBits(BF16ToF32(F32ToBF16(v)), BF16ToFloat(FloatToBF16(v))) || std::isnan(v));
  }
  for (float v : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 3.49f, -7.51f, 1e6f}) {
    std::vector<int32_t> want(1);
    QuantizeRow(DType::kI32, &v, want.data(), 1);
    EXPECT_EQ(F32ToI32(v), want[0]) << v;
  }
  char buf[4];
  StoreFromF32(kTypeBF16, buf, 3.0f);
  EXPECT_EQ(LoadAsF32(kTypeBF16, buf), 3.0f);
  StoreFromF32(kTypeI32, buf, -2.5f);
  EXPECT_EQ(LoadAsF32(kTypeI32, buf), -2.0f);  // ties to even.
}

}  // namespace
}  // namespace tg::cuda
