// SAMPLE's CPU kernel against docs/ops.md, worked out here in double: the frequencies of its
// draws over many seeds and positions follow the distribution that the penalty, top-k,
// temperature, top-p and min-p leave (within 5 standard deviations of a binomial count);
// on 32000-logit rows every pick equals the one the documented steps give for the same
// uniform number; temperature 0 is the first largest logit; NaN and -inf never come up; a
// row's token does not depend on its batch, its row index or the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backends/cpu/compute_params.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/philox.h"
#include "core/context.h"
#include "core/ops.h"

namespace tg::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Ids 1 and 3 tie for the largest logit.
const std::vector<float> kLogits = {1.0f, 2.5f, 0.3f, 2.5f, -1.0f, 0.9f, 1.7f, -0.2f};

// The candidates docs/ops.md keeps, best first, with their weights.
struct Kept {
  std::vector<int32_t> ids;
  std::vector<double> w;
};

Kept KeptCandidates(const std::vector<float>& logits, const SampleParams& p,
                    const std::vector<int32_t>& recent) {
  std::vector<double> l(logits.begin(), logits.end());
  const std::set<int32_t> distinct(recent.begin(), recent.end());
  for (int32_t t : distinct) {
    if (p.repeat_penalty == 1.0f || t < 0 || t >= static_cast<int32_t>(l.size())) continue;
    l[t] = static_cast<float>(l[t] > 0 ? l[t] / p.repeat_penalty : l[t] * p.repeat_penalty);
  }
  std::vector<int32_t> order;
  for (size_t i = 0; i < l.size(); ++i) {
    if (std::isnan(l[i]) || l[i] == -kInf) continue;
    l[i] = std::min<double>(l[i], std::numeric_limits<float>::max());
    order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  if (p.top_k > 0 && p.top_k < static_cast<int32_t>(order.size())) order.resize(p.top_k);
  Kept k;
  for (int32_t id : order) {
    k.ids.push_back(id);
    k.w.push_back(std::exp((l[id] - l[order[0]]) / p.temperature));
  }
  const double total = std::accumulate(k.w.begin(), k.w.end(), 0.0);
  size_t keep = k.w.size();
  double prefix = 0;
  for (size_t i = 0; p.top_p < 1 && i < k.w.size(); ++i) {
    prefix += k.w[i];
    if (prefix >= p.top_p * total) {
      keep = i + 1;
      break;
    }
  }
  while (p.min_p > 0 && keep > 1 && k.w[keep - 1] < p.min_p) --keep;
  k.ids.resize(keep);
  k.w.resize(keep);
  return k;
}

std::vector<double> Expected(const std::vector<float>& logits, const SampleParams& p,
                             const std::vector<int32_t>& recent) {
  const Kept k = KeptCandidates(logits, p, recent);
  const double sum = std::accumulate(k.w.begin(), k.w.end(), 0.0);
  std::vector<double> prob(logits.size(), 0.0);
  for (size_t i = 0; i < k.ids.size(); ++i) prob[k.ids[i]] = k.w[i] / sum;
  return prob;
}

int32_t ExpectedPick(const std::vector<float>& logits, const SampleParams& p, double u) {
  const Kept k = KeptCandidates(logits, p, {});
  const double target = u * std::accumulate(k.w.begin(), k.w.end(), 0.0);
  double prefix = 0;
  for (size_t i = 0; i < k.ids.size(); ++i) {
    prefix += k.w[i];
    if (prefix > target) return k.ids[i];
  }
  return k.ids.back();
}

// Runs the kernel on `rows` (each of the same length) at `positions`, as nth threads (the
// kernel never syncs, so the threads' shares run one after another).
std::vector<int32_t> RunSample(const std::vector<std::vector<float>>& rows,
                               std::vector<int32_t> positions, const SampleParams& p,
                               std::vector<int32_t> recent = {}, int nth = 1) {
  const int64_t n = static_cast<int64_t>(rows[0].size());
  const int64_t n_rows = static_cast<int64_t>(rows.size());
  std::vector<float> logits_data;
  for (const auto& r : rows) logits_data.insert(logits_data.end(), r.begin(), r.end());
  Context ctx;
  Tensor* logits = *ctx.NewTensor(DType::kF32, {n, n_rows});
  Tensor* pos = *ctx.NewTensor(DType::kI32, {n_rows});
  Tensor* window =
      recent.empty() ? nullptr : *ctx.NewTensor(DType::kI32, {static_cast<int64_t>(recent.size())});
  logits->data = logits_data.data();
  pos->data = positions.data();
  if (window != nullptr) window->data = recent.data();
  absl::StatusOr<Tensor*> dst = Sample(ctx, logits, pos, window, p);
  EXPECT_TRUE(dst.ok()) << dst.status();
  std::vector<int32_t> out(n_rows, -1);
  (*dst)->data = out.data();
  std::vector<uint8_t> scratch(SampleWorkSize(*dst, nth) + 64);
  for (int ith = 0; ith < nth; ++ith) {
    ComputeParams cp;
    cp.ith = ith;
    cp.nth = nth;
    cp.wdata = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) &
                                       ~uintptr_t{63});
    ComputeSample(cp, *dst);
  }
  return out;
}

// Draws kSeeds x kPerSeed tokens from `logits` and checks each id's frequency against the
// documented distribution: ids of probability 0 never come up, the others within 5 sigma.
void ExpectFrequencies(const std::vector<float>& logits, SampleParams p,
                       const std::vector<int32_t>& recent = {}) {
  constexpr int kSeeds = 8;
  constexpr int kPerSeed = 25000;
  const std::vector<double> want = Expected(logits, p, recent);
  std::vector<int> count(logits.size(), 0);
  const std::vector<std::vector<float>> rows(kPerSeed, logits);
  std::vector<int32_t> positions(kPerSeed);
  std::iota(positions.begin(), positions.end(), 0);
  for (int s = 0; s < kSeeds; ++s) {
    p.seed = 0x5eed0000ull + s;
    for (int32_t id : RunSample(rows, positions, p, recent)) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, static_cast<int32_t>(logits.size()));
      ++count[id];
    }
  }
  constexpr double kDraws = kSeeds * kPerSeed;
  for (size_t id = 0; id < want.size(); ++id) {
    if (want[id] == 0) {
      EXPECT_EQ(count[id], 0) << "id " << id << " is not a kept candidate";
      continue;
    }
    const double sigma = std::sqrt(want[id] * (1 - want[id]) / kDraws);
    EXPECT_NEAR(count[id] / kDraws, want[id], 5 * sigma) << "id " << id;
  }
}

SampleParams Plain(float temperature) {
  return {.temperature = temperature, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
}

TEST(SampleKernelTest, SoftmaxAtTemperature) {
  ExpectFrequencies(kLogits, Plain(1.0f));
  ExpectFrequencies(kLogits, Plain(0.5f));
  ExpectFrequencies(kLogits, Plain(2.0f));
}

TEST(SampleKernelTest, TopKKeepsTheBestWithTiesBySmallerId) {
  SampleParams p = Plain(0.7f);
  for (int32_t k : {1, 2, 3, 5}) {
    p.top_k = k;
    ExpectFrequencies(kLogits, p);
  }
}

TEST(SampleKernelTest, TopPKeepsTheShortestPrefixOfTheTemperedWeights) {
  SampleParams p = Plain(1.5f);
  for (float top_p : {0.0f, 0.3f, 0.6f, 0.9f}) {
    p.top_p = top_p;
    ExpectFrequencies(kLogits, p);
  }
}

TEST(SampleKernelTest, MinPCutsRelativeToTheBest) {
  SampleParams p = Plain(1.0f);
  for (float min_p : {0.05f, 0.3f, 0.9f}) {
    p.min_p = min_p;
    ExpectFrequencies(kLogits, p);
  }
}

TEST(SampleKernelTest, AllCutsAndThePenaltyTogether) {
  // Ids 1, 4 and 6 are penalized once each; -1 and 99 are outside the vocabulary.
  const std::vector<int32_t> recent = {1, 4, 4, -1, 99, 6};
  ExpectFrequencies(
      kLogits,
      {.temperature = 0.9f, .top_k = 5, .top_p = 0.9f, .min_p = 0.05f, .repeat_penalty = 1.3f},
      recent);
  ExpectFrequencies(
      kLogits,
      {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 0.8f},
      recent);
}

TEST(SampleKernelTest, NanAndMinusInfinityAreNeverDrawn) {
  const std::vector<float> logits = {0.5f, kNan, 1.0f, -kInf, 0.0f, kNan, 0.7f, -kInf};
  ExpectFrequencies(logits, Plain(1.0f));
  EXPECT_EQ(RunSample({{-kInf, kNan, -kInf}}, {3}, Plain(1.0f)), std::vector<int32_t>{0});
  // +inf ranks as the largest float: it takes every draw from finite logits.
  EXPECT_EQ(RunSample({{1.0f, kInf, 3.0f}, {kInf, 0.0f, kInf}}, {5, 6}, Plain(1.0f))[0], 1);
}

TEST(SampleKernelTest, TemperatureZeroIsTheFirstLargestAfterThePenalty) {
  const SampleParams greedy = {.temperature = 0.0f, .repeat_penalty = 2.0f};
  EXPECT_EQ(RunSample({kLogits}, {0}, greedy), std::vector<int32_t>{1});
  // Id 1 halved to 1.25: 3 is the largest; then 3 too: 6 (1.7).
  EXPECT_EQ(RunSample({kLogits}, {0}, greedy, {1}), std::vector<int32_t>{3});
  EXPECT_EQ(RunSample({kLogits}, {0}, greedy, {3, 1, 1}), std::vector<int32_t>{6});
  EXPECT_EQ(RunSample({{kNan, -2.0f, kNan, 4.0f}}, {9}, {.temperature = -1.0f}),
            std::vector<int32_t>{3});
}

// 32000 logits: the heap and its vectorized rejection (top-k) and the full sort (k = 0)
// against the documented steps for the same uniform number.
TEST(SampleKernelTest, LargeVocabularyPicksWhatTheStepsGive) {
  constexpr int64_t kVocab = 32000;
  constexpr int kRows = 48;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& v : row) v = std::round(normal(rng) * 64.0f) / 64.0f;  // many equal logits.
  }
  std::vector<int32_t> positions(kRows);
  std::iota(positions.begin(), positions.end(), 1000);
  for (SampleParams p : {SampleParams{.top_k = 40, .seed = 7},
                         SampleParams{.temperature = 1.5f, .top_k = 0, .top_p = 0.9f, .seed = 8},
                         SampleParams{.temperature = 0.6f, .top_k = 1000, .min_p = 0.0f, .seed = 9},
                         SampleParams{.top_k = 1, .seed = 10}}) {
    const std::vector<int32_t> got = RunSample(rows, positions, p, {}, /*nth=*/3);
    for (int r = 0; r < kRows; ++r) {
      EXPECT_EQ(got[r], ExpectedPick(rows[r], p, SampleUniform(p.seed, positions[r])))
          << "row " << r << " top_k " << p.top_k;
    }
  }
}

// A row's draw depends on (seed, position) only: alone, in a batch, at another row index,
// on any thread.
TEST(SampleKernelTest, DrawDoesNotDependOnTheBatch) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<std::vector<float>> rows(9, std::vector<float>(300));
  for (auto& row : rows) {
    for (float& v : row) v = dist(rng);
  }
  rows[4] = rows[7];  // the same logits at two positions.
  std::vector<int32_t> positions = {40, 41, 42, 43, 44, 45, 46, 47, 48};
  const SampleParams p = {
      .temperature = 1.2f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 99};
  const std::vector<int32_t> batch = RunSample(rows, positions, p);
  for (int nth : {2, 3}) EXPECT_EQ(RunSample(rows, positions, p, {}, nth), batch);
  std::vector<int32_t> alone;
  for (size_t r = 0; r < rows.size(); ++r)
    alone.push_back(RunSample({rows[r]}, {positions[r]}, p)[0]);
  EXPECT_EQ(alone, batch);
  std::vector<std::vector<float>> reversed(rows.rbegin(), rows.rend());
  std::vector<int32_t> reversed_pos(positions.rbegin(), positions.rend());
  std::vector<int32_t> back = RunSample(reversed, reversed_pos, p);
  std::reverse(back.begin(), back.end());
  EXPECT_EQ(back, batch);
  // Over 9 draws of wide distributions, some position must pick differently.
  EXPECT_GT(std::set<int32_t>(batch.begin(), batch.end()).size(), 1u);
}

}  // namespace
}  // namespace tg::cpu
