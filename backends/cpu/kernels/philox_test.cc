// Philox4x32-10 against the known-answer vectors of its specification (Random123's
// tests/kat_vectors, "philox4x32 10" lines), and SAMPLE's uniform number built from it.
#include "backends/cpu/kernels/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace tg::cpu {
namespace {

struct KnownAnswer {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter output;
};

// Random123 v1.14.0, tests/kat_vectors.
constexpr KnownAnswer kKat[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  for (const KnownAnswer& k : kKat) EXPECT_EQ(Philox4x32(k.counter, k.key), k.output);
}

// Counter (0, 0, 0, 0) and key (0, 0) give words 0x6627e8d5 and 0xe169c58d: u is their
// leading 53 bits over 2^53.
TEST(PhiloxTest, UniformTakesTheLeading53BitsOfWordsZeroAndOne) {
  const double want = (0x6627e8d5 * 2097152.0 + (0xe169c58du >> 11)) / 9007199254740992.0;
  EXPECT_EQ(SampleUniform(0, 0), want);
}

// Position and both halves of the seed each change the draw; the same inputs repeat it.
TEST(PhiloxTest, UniformDependsOnSeedAndPositionOnly) {
  std::set<double> seen;
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 32}) {
    for (int32_t position : {0, 1, 2, 1 << 20}) {
      const double u = SampleUniform(seed, position);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
      EXPECT_EQ(u, SampleUniform(seed, position));
      seen.insert(u);
    }
  }
  EXPECT_EQ(seen.size(), 12u);
}

}  // namespace
}  // namespace tg::cpu
