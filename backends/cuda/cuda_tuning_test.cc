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

// The tuning `env` gives has want's values and adds no note.
void ExpectTuningWithoutNotes(const std::map<std::string, std::string>& env,
                              const CudaTuning& want) {
  std::vector<std::string> notes;
  const CudaTuning t = FromMap(env, &notes);
  EXPECT_EQ(t.mmq_max_batch, want.mmq_max_batch);
  EXPECT_EQ(t.graph_max_tokens, want.graph_max_tokens);
  EXPECT_EQ(t.fa_mma_min_queries, want.fa_mma_min_queries);
  EXPECT_EQ(t.graphs, want.graphs);
  EXPECT_EQ(t.fusion, want.fusion);
  EXPECT_TRUE(notes.empty());
}

TEST(CudaTuningTest, DefaultsWithoutTheEnvironment) {
  ExpectTuningWithoutNotes({}, {kDefaultMmqMaxBatch, kDefaultGraphMaxTokens,
                                kDefaultFlashAttnMmaMinQueries, true, true});
}

TEST(CudaTuningTest, OverridesApply) {
  ExpectTuningWithoutNotes({{"TG_CUDA_MMQ_MAX_BATCH", "0"},
                            {"TG_CUDA_GRAPH_MAX_TOKENS", "1"},
                            {"TG_CUDA_FA_MMA_MIN_QUERIES", "128"},
                            {"TG_CUDA_GRAPHS", "0"},
                            {"TG_CUDA_FUSION", "0"}},
                           {0, 1, 128, false, false});
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
