// Tests of models/synth/synth_weights: tensors do not depend on the thread count, chunks draw
// from different streams, and the values follow the requested normal distribution (checked on
// the dequantized bytes with f64 statistics, not through the generator).
#include "models/synth/synth_weights.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/quants.h"
#include "gtest/gtest.h"

namespace tg::synth {
namespace {

constexpr int64_t kNe0 = 256;
constexpr int64_t kRows = 3 * kRowsPerChunk + 5;  // a partial last chunk.

TEST(RandomTensorTest, BytesDoNotDependOnTheThreadCount) {
  for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_K}) {
    const std::vector<uint8_t> one = RandomTensor(type, kNe0, kRows, 0.0f, 0.02f, 7, 1);
    for (int threads : {2, 3, 16}) {
      EXPECT_EQ(RandomTensor(type, kNe0, kRows, 0.0f, 0.02f, 7, threads), one)
          << DTypeName(type) << " on " << threads << " threads";
    }
    EXPECT_NE(RandomTensor(type, kNe0, kRows, 0.0f, 0.02f, 8, 1), one) << "another seed";
  }
}

TEST(RandomTensorTest, ChunksDrawFromDifferentStreams) {
  const std::vector<uint8_t> t = RandomTensor(DType::kF32, kNe0, kRows, 0.0f, 1.0f, 3, 2);
  const size_t row_bytes = kNe0 * sizeof(float);
  for (int64_t c = 1; c * kRowsPerChunk < kRows; ++c) {
    EXPECT_NE(std::memcmp(t.data(), t.data() + c * kRowsPerChunk * row_bytes, row_bytes), 0)
        << "chunk " << c << " starts like chunk 0";
  }
}

TEST(RandomTensorTest, ValuesFollowTheRequestedNormal) {
  const float mean = 0.5f, stddev = 0.25f;
  const std::vector<uint8_t> t = RandomTensor(DType::kF32, kNe0, kRows, mean, stddev, 11, 4);
  std::vector<float> x(static_cast<size_t>(kNe0 * kRows));
  std::memcpy(x.data(), t.data(), t.size());
  double sum = 0, sum2 = 0, beyond_3sd = 0;
  for (float v : x) {
    sum += v;
    sum2 += static_cast<double>(v) * v;
    if (std::abs(v - mean) > 3 * stddev) ++beyond_3sd;
  }
  const double n = static_cast<double>(x.size());
  const double m = sum / n, sd = std::sqrt(sum2 / n - m * m);
  // 25,856 draws: the sample mean is within 4 standard errors, the stddev within 3%.
  EXPECT_NEAR(m, mean, 4 * stddev / std::sqrt(n));
  EXPECT_NEAR(sd, stddev, 0.03 * stddev);
  EXPECT_LT(beyond_3sd / n, 0.006);  // 0.27% for a normal.
}

}  // namespace
}  // namespace tg::synth
