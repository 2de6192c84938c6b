// Sampler against distributions computed here in double: greedy picks the first largest
// logit; with a temperature the frequencies of many seeded draws match the softmax of
// logits / temperature, restricted to the top k and then to the nucleus of top_p and
// renormalized; the same seed repeats its draws.
#include "models/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tg {
namespace {

// Ids 1 and 3 tie for the largest logit; every other logit differs.
const std::vector<float> kLogits = {1.0f, 2.5f, 0.3f, 2.5f, -1.0f, 0.9f, 1.7f, -0.2f};

// The probability of each id: softmax(logits / temperature) over the top_k largest (ties:
// smaller id first; top_k <= 0: all), then over the smallest prefix, largest first, whose
// probability reaches top_p (top_p >= 1: all).
std::vector<double> Expected(const std::vector<float>& logits, double temperature, int top_k,
                             double top_p) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (top_k > 0 && top_k < static_cast<int>(order.size())) order.resize(top_k);
  std::vector<double> p(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    p[i] = std::exp(static_cast<double>(logits[order[i]]) / temperature);
    sum += p[i];
  }
  size_t keep = order.size();
  if (top_p < 1) {
    double cumulative = 0;
    for (keep = 0; keep < order.size() && cumulative < top_p;) cumulative += p[keep++] / sum;
  }
  const double kept = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  std::vector<double> out(logits.size(), 0.0);
  for (size_t i = 0; i < keep; ++i) out[order[i]] = p[i] / kept;
  return out;
}

// Draws n tokens and checks each id's frequency against `want`: ids of probability 0 never
// come up, the others within 5 standard deviations of a binomial count.
void ExpectFrequencies(const SamplerOptions& options, const std::vector<double>& want) {
  constexpr int kDraws = 200000;
  Sampler sampler(options);
  std::vector<int> count(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    const int32_t id = sampler.Sample(kLogits);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, static_cast<int32_t>(kLogits.size()));
    ++count[id];
  }
  for (size_t id = 0; id < want.size(); ++id) {
    const double freq = static_cast<double>(count[id]) / kDraws;
    if (want[id] == 0) {
      EXPECT_EQ(count[id], 0) << "id " << id << " is outside the candidates";
      continue;
    }
    const double sigma = std::sqrt(want[id] * (1 - want[id]) / kDraws);
    EXPECT_NEAR(freq, want[id], 5 * sigma) << "id " << id;
  }
}

TEST(SamplerTest, GreedyPicksTheFirstLargestLogit) {
  for (float temperature : {0.0f, -1.0f}) {
    Sampler sampler({.temperature = temperature, .top_k = 3, .top_p = 0.5f, .seed = 7});
    EXPECT_EQ(sampler.Sample(kLogits), 1);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    for (int round = 0; round < 100; ++round) {
      std::vector<float> logits(37);
      for (float& l : logits) l = dist(rng);
      int32_t want = 0;
      for (int32_t i = 1; i < 37; ++i) {
        if (logits[i] > logits[want]) want = i;
      }
      ASSERT_EQ(sampler.Sample(logits), want) << "round " << round;
    }
  }
}

TEST(SamplerTest, NoLogitsGiveNoToken) {
  Sampler sampler({});
  EXPECT_EQ(sampler.Sample({}), -1);
}

TEST(SamplerTest, TemperatureDrawsFollowTheSoftmax) {
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    SCOPED_TRACE(absl::StrCat("temperature ", temperature));
    ExpectFrequencies({.temperature = temperature, .top_k = 0, .top_p = 1.0f, .seed = 1},
                      Expected(kLogits, temperature, 0, 1.0));
  }
}

TEST(SamplerTest, TopKDrawsOnlyTheKLargest) {
  const std::vector<double> want = Expected(kLogits, 1.0, 3, 1.0);
  // Ids 1 and 3 (tied) and 6.
  ASSERT_GT(want[1], 0);
  ASSERT_GT(want[3], 0);
  ASSERT_GT(want[6], 0);
  ASSERT_EQ(want[0], 0);
  ExpectFrequencies({.temperature = 1.0f, .top_k = 3, .top_p = 1.0f, .seed = 2}, want);
  // k = 1: always the first largest.
  ExpectFrequencies({.temperature = 1.0f, .top_k = 1, .top_p = 1.0f, .seed = 3},
                    {0, 1, 0, 0, 0, 0, 0, 0});
}

TEST(SamplerTest, TopPDrawsTheNucleus) {
  // Cumulative probabilities at temperature 1: 0.324, 0.649, 0.795, 0.867, 0.932, ...; a
  // top_p well inside a step keeps the nucleus away from float rounding.
  for (float top_p : {0.7f, 0.9f}) {
    SCOPED_TRACE(absl::StrCat("top_p ", top_p));
    const std::vector<double> want = Expected(kLogits, 1.0, 0, top_p);
    const int kept =
        static_cast<int>(std::count_if(want.begin(), want.end(), [](double p) { return p > 0; }));
    EXPECT_EQ(kept, top_p < 0.8f ? 3 : 5);
    ExpectFrequencies({.temperature = 1.0f, .top_k = 0, .top_p = top_p, .seed = 4}, want);
  }
  // Within the top k, renormalized there first.
  ExpectFrequencies({.temperature = 0.8f, .top_k = 4, .top_p = 0.9f, .seed = 5},
                    Expected(kLogits, 0.8, 4, 0.9));
}

TEST(SamplerTest, TheSameSeedRepeatsItsDraws) {
  const SamplerOptions options = {.temperature = 1.5f, .top_k = 0, .top_p = 1.0f, .seed = 42};
  Sampler a(options);
  Sampler b(options);
  SamplerOptions other = options;
  other.seed = 43;
  Sampler c(other);
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const int32_t x = a.Sample(kLogits);
    ASSERT_EQ(x, b.Sample(kLogits)) << "draw " << i;
    differ += x != c.Sample(kLogits);
  }
  EXPECT_GT(differ, 100);
}

TEST(SamplerTest, TopKOrdersLargestFirstAndTiesBySmallerId) {
  const std::vector<std::pair<float, int32_t>> top = TopK(kLogits, 4);
  const std::vector<std::pair<float, int32_t>> want = {{2.5f, 1}, {2.5f, 3}, {1.7f, 6}, {1.0f, 0}};
  EXPECT_EQ(top, want);
  EXPECT_EQ(TopK(kLogits, 100).size(), kLogits.size());
  EXPECT_TRUE(TopK(kLogits, 0).empty());
  EXPECT_TRUE(TopK(kLogits, -3).empty());
}

}  // namespace
}  // namespace tg
