// The tunables' defaults and their environment overrides: good values apply, bad ones keep
// the default and say which variable and range.
#include "backends/cuda/cuda_tuning.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

using ::testing::HasSubstr;

CudaTuning FromMap(const std::map<std::string, std::string>& env, std::vector<std::string>* notes) {
  return CudaTuningFromEnv(
      [&](const char* n) {
        auto it = env.find(n);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      notes);
}

TEST(CudaTuningTest, DefaultsWithoutTheEnvironment) {
  std::vector<std::string> notes;
  const CudaTuning t = FromMap({}, &notes);
  EXPECT_EQ(t.mmq_max_batch, kDefaultMmqMaxBatch);
  EXPECT_EQ(t.graph_max_tokens, kDefaultGraphMaxTokens);
  EXPECT_EQ(t.fa_mma_min_queries, kDefaultFlashAttnMmaMinQueries);
  EXPECT_TRUE(t.graphs);
  EXPECT_TRUE(t.fusion);
  EXPECT_TRUE(notes.empty());
}

TEST(CudaTuningTest, OverridesApply) {
  std::vector<std::string> notes;
  const CudaTuning t = FromMap({{"TG_CUDA_MMQ_MAX_BATCH", "0"},
                                {"TG_CUDA_GRAPH_MAX_TOKENS", "1"},
                                {"TG_CUDA_FA_MMA_MIN_QUERIES", "128"},
                                {"TG_CUDA_GRAPHS", "0"},
                                {"TG_CUDA_FUSION", "0"}},
                               &notes);
  EXPECT_EQ(t.mmq_max_batch, 0);
  EXPECT_EQ(t.graph_max_tokens, 1);
  EXPECT_EQ(t.fa_mma_min_queries, 128);
  EXPECT_FALSE(t.graphs);
  EXPECT_FALSE(t.fusion);
  EXPECT_TRUE(notes.empty());
}

TEST(CudaTuningTest, BadValuesKeepTheDefaultAndSaySo) {
  std::vector<std::string> notes;
  const CudaTuning t = FromMap({{"TG_CUDA_MMQ_MAX_BATCH", "-3"},
                                {"TG_CUDA_GRAPHS", "yes"},
                                {"TG_CUDA_FA_MMA_MIN_QUERIES", "0"}},
                               &notes);
  EXPECT_EQ(t.mmq_max_batch, kDefaultMmqMaxBatch);
  EXPECT_TRUE(t.graphs);
  EXPECT_EQ(t.fa_mma_min_queries, kDefaultFlashAttnMmaMinQueries);
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_THAT(notes[0], HasSubstr("TG_CUDA_MMQ_MAX_BATCH='-3'"));
  EXPECT_THAT(notes[1], HasSubstr("TG_CUDA_FA_MMA_MIN_QUERIES='0' is not a number from 1"));
  EXPECT_THAT(notes[2], HasSubstr("TG_CUDA_GRAPHS='yes' is not a number from 0 to 1"));
}

}  // namespace
}  // namespace tg::cuda
