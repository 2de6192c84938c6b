// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), as the Random123 library specifies it: ten rounds of a keyed bijection of a
// 128-bit counter. SAMPLE's draw is a pure function of (seed, position) through it
// (docs/ops.md), so where and in what batch a row is sampled does not change its token.
// Pure functions, thread-safe.
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_PHILOX_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_PHILOX_H_

#include <array>
#include <cstdint>

namespace tg::cpu {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline PhiloxCounter Philox4x32(PhiloxCounter c, PhiloxKey k) {
  // Random123's multipliers and Weyl key increments (golden ratio, sqrt(3) - 1).
  constexpr uint64_t kMul0 = 0xD2511F53u;
  constexpr uint64_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  constexpr int kRounds = 10;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t p0 = kMul0 * c[0];
    const uint64_t p1 = kMul1 * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k = {k[0] + kWeyl0, k[1] + kWeyl1};
  }
  return c;
}

// SAMPLE's uniform number in [0, 1) for a row at `position`: the 53-bit integer made of
// output word 0 and the top 21 bits of word 1 of Philox4x32-10 with counter
// (position, 0, 0, 0) and key (seed low, seed high), times 2^-53 (exact in a double).
inline double SampleUniform(uint64_t seed, int32_t position) {
  const PhiloxCounter x =
      Philox4x32({static_cast<uint32_t>(position), 0, 0, 0},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
  return static_cast<double>((uint64_t{x[0]} << 21) | (x[1] >> 11)) * kTwoToMinus53;
}

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_PHILOX_H_
