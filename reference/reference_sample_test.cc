// The reference SAMPLE on hand-worked rows: its Philox4x32-10 against Random123's known
// answers, and picks that follow from a few weights worked out by hand for the uniform
// number of each position (two candidates of weights 1 and w: the first iff u < 1 / (1 + w)).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/ops.h"
#include "reference/reference_internal.h"
#include "reference/reference_ops.h"

namespace tg::ref {
namespace {

using internal::SampleUniform;

TEST(ReferenceSampleTest, PhiloxMatchesRandom123KnownAnswers) {
  using internal::Philox4x32_10;
  EXPECT_EQ(Philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      Philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      Philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// The reference's picks for one row at positions 0..n-1.
std::vector<int32_t> Picks(std::vector<float> row, const SampleParams& p, int n,
                           std::vector<int32_t> recent = {}) {
  Context ctx;
  const int64_t vocab = static_cast<int64_t>(row.size());
  std::vector<float> logits_data;
  for (int i = 0; i < n; ++i) logits_data.insert(logits_data.end(), row.begin(), row.end());
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = i;
  Tensor* logits = *ctx.NewTensor(DType::kF32, {vocab, n});
  Tensor* pos = *ctx.NewTensor(DType::kI32, {n});
  Tensor* window = nullptr;
  logits->data = logits_data.data();
  pos->data = positions.data();
  if (!recent.empty()) {
    window = *ctx.NewTensor(DType::kI32, {static_cast<int64_t>(recent.size())});
    window->data = recent.data();
  }
  absl::StatusOr<Tensor*> dst = Sample(ctx, logits, pos, window, p);
  EXPECT_TRUE(dst.ok()) << dst.status();
  std::vector<int32_t> out(n, -1);
  (*dst)->data = out.data();
  EXPECT_TRUE(Compute(*dst).ok());
  return out;
}

// For each position i: `first` when u_i * (1 + w) < 1, else `second`.
std::vector<int32_t> TwoWay(uint64_t seed, int n, double w, int32_t first, int32_t second) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(SampleUniform(seed, i) * (1 + w) < 1 ? first : second);
  return out;
}

constexpr int kPositions = 200;

TEST(ReferenceSampleTest, TwoCandidatesSplitByTheirWeights) {
  const SampleParams p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 5};
  // Logits 0 and ln 3: id 1 has weight 1, id 0 weight 1/3.
  const std::vector<int32_t> got = Picks({0.0f, std::log(3.0f)}, p, kPositions);
  EXPECT_EQ(got, TwoWay(5, kPositions, std::exp(-std::log(3.0f)), 1, 0));
  EXPECT_GT(std::count(got.begin(), got.end(), 0), 20);
  EXPECT_GT(std::count(got.begin(), got.end(), 1), 100);
}

TEST(ReferenceSampleTest, TopKTopPAndMinPCut) {
  const std::vector<float> row = {std::log(0.2f), 0.0f, std::log(0.5f)};  // weights .2, 1, .5.
  const double w2 = std::exp(static_cast<double>(std::log(0.5f)));
  SampleParams p = {.temperature = 1.0f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f, .seed = 11};
  EXPECT_EQ(Picks(row, p, kPositions), TwoWay(11, kPositions, w2, 1, 2));
  p.top_k = 1;
  EXPECT_EQ(Picks(row, p, kPositions), std::vector<int32_t>(kPositions, 1));
  // top_p: 0.5 * 1.7 = 0.85 <= 1 keeps one; 0.7 * 1.7 = 1.19 keeps two.
  p = {.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .min_p = 0.0f, .seed = 11};
  EXPECT_EQ(Picks(row, p, kPositions), std::vector<int32_t>(kPositions, 1));
  p.top_p = 0.7f;
  EXPECT_EQ(Picks(row, p, kPositions), TwoWay(11, kPositions, w2, 1, 2));
  // min_p 0.3 drops weight 0.2, keeps 0.5.
  p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.3f, .seed = 11};
  EXPECT_EQ(Picks(row, p, kPositions), TwoWay(11, kPositions, w2, 1, 2));
}

TEST(ReferenceSampleTest, PenaltyThenTemperature) {
  // Penalty 2 on ids 0 and 2 (0 twice; -5 and 7 are outside): logits 1, 1, -2.
  const std::vector<float> row = {2.0f, 1.0f, -1.0f};
  const std::vector<int32_t> recent = {0, 0, 2, -5, 7};
  SampleParams p = {.temperature = 0.0f, .repeat_penalty = 2.0f};
  EXPECT_EQ(Picks(row, p, 3, recent), std::vector<int32_t>(3, 0));  // the first of the tie.
  p = {.temperature = 0.5f,
       .top_k = 2,
       .top_p = 1.0f,
       .min_p = 0.0f,
       .repeat_penalty = 2.0f,
       .seed = 3};
  EXPECT_EQ(Picks(row, p, kPositions, recent), TwoWay(3, kPositions, 1.0, 0, 1));
}

}  // namespace
}  // namespace tg::ref
