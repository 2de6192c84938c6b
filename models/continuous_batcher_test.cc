// ContinuousBatcher on stories260K: requests that arrive while others decode (one with a
// long prompt read in chunks) each get the greedy tokens they get alone in a LlamaSession
// (the independent path); the running requests get a token at every step while the long
// prompt is read; a request waits for cells and then runs; cancelling and stopping end a
// request and free its cells; bad requests are refused at once.
#include "models/continuous_batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "models/llama_model.h"
#include "models/shared_model_path.h"
#include "tests/lib/batched_vs_alone.h"

namespace tg {
namespace {

using ::testing::HasSubstr;

class ContinuousBatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = DemoModelPath();
    if (!std::ifstream(path).good()) GTEST_SKIP() << path << " not found";
    LoadOptions lo;
    lo.plan = DevicePlan{SplitMode::kNone, {&cpu_}, {1.0f}};
    model_ = *LlamaModel::Load(path, lo);
  }

  std::unique_ptr<BatchSession> Session(int64_t n_ctx) {
    BatchSessionOptions o;
    o.n_ctx = n_ctx;
    o.kv_type = DType::kF32;
    return *BatchSession::Create(*model_, o);
  }

  // A request that records its tokens (and the step each came in) and how it ended.
  struct Record {
    std::vector<int32_t> tokens;
    std::vector<int> steps;
    std::optional<absl::Status> done;
  };
  GenerationRequest Request(std::vector<int32_t> prompt, int64_t max_tokens, Record* rec,
                            const int* step) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.on_token = [rec, step](int32_t t) {
      rec->tokens.push_back(t);
      rec->steps.push_back(*step);
      return true;
    };
    r.on_done = [rec](const absl::Status& s) { rec->done = s; };
    return r;
  }

  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, int steps) {
    return testing::DecodeAlone(*model_, prompt, steps).tokens;
  }

  cpu::CpuDevice cpu_{"CPU0", "cpu:0", 1};
  std::unique_ptr<LlamaModel> model_;
};

TEST_F(ContinuousBatcherTest, LateRequestsAndALongPromptLeaveEveryoneTheirTokens) {
  auto session = Session(512);
  ContinuousBatcher batcher(*session, /*n_batch=*/32);
  std::vector<int32_t> long_prompt = {1};
  for (int k = 1; k < 150; ++k) long_prompt.push_back((k * 17 + 9) % 500 + 3);
  struct Plan {
    int at;
    std::vector<int32_t> prompt;
    int64_t max_tokens;
  };
  const std::vector<Plan> plans = {{0, testing::VariedPrompt(1), 20},
                                   {3, testing::VariedPrompt(2), 16},
                                   {5, long_prompt, 8},
                                   {7, testing::VariedPrompt(4), 10}};
  std::vector<Record> rec(plans.size());
  int step = 0;
  for (; step < 200 && (step <= plans.back().at || !batcher.idle()); ++step) {
    for (size_t i = 0; i < plans.size(); ++i) {
      if (plans[i].at == step) {
        batcher.Submit(Request(plans[i].prompt, plans[i].max_tokens, &rec[i], &step));
      }
    }
    ASSERT_TRUE(batcher.Step().ok());
  }
  ASSERT_TRUE(batcher.idle());
  for (size_t i = 0; i < plans.size(); ++i) {
    ASSERT_TRUE(rec[i].done.has_value()) << i;
    EXPECT_TRUE(rec[i].done->ok()) << *rec[i].done;
    EXPECT_EQ(rec[i].tokens, Alone(plans[i].prompt, plans[i].max_tokens)) << "request " << i;
  }
  // The long prompt took 5 steps of chunks (32 tokens a step, less what the decodes took);
  // the requests decoding meanwhile got a token at every one of those steps.
  const int long_first = rec[2].steps.front();
  EXPECT_GE(long_first - plans[2].at, 4);
  for (int s = plans[2].at; s < long_first; ++s) {
    EXPECT_THAT(rec[0].steps, ::testing::Contains(s)) << "request 0 had no token at step " << s;
  }
  EXPECT_EQ(session->cells().used(), 0);
}

TEST_F(ContinuousBatcherTest, ARequestWaitsForCellsThenRuns) {
  auto session = Session(64);  // room for one request of 40 cells at a time.
  ContinuousBatcher batcher(*session, 64);
  Record a, b;
  int step = 0;
  batcher.Submit(Request(testing::VariedPrompt(3), 22, &a, &step));  // 19 + 22 = 41 cells.
  batcher.Submit(Request(testing::VariedPrompt(2), 26, &b, &step));  // 14 + 26 = 40.
  ASSERT_TRUE(batcher.Step().ok());
  EXPECT_EQ(batcher.running(), 1);
  EXPECT_EQ(batcher.queued(), 1);
  for (step = 1; step < 200 && !batcher.idle(); ++step) ASSERT_TRUE(batcher.Step().ok());
  EXPECT_EQ(a.tokens, Alone(testing::VariedPrompt(3), 22));
  EXPECT_EQ(b.tokens, Alone(testing::VariedPrompt(2), 26));
  EXPECT_GT(b.steps.front(), a.steps.back());  // b started once a had ended.
}

TEST_F(ContinuousBatcherTest, CancelAndStopEndARequestAndFreeItsCells) {
  auto session = Session(512);
  ContinuousBatcher batcher(*session, 64);
  Record stopper, cancelled, queued;
  int step = 0;
  GenerationRequest r = Request(testing::VariedPrompt(1), 30, &stopper, &step);
  r.on_token = [&stopper](int32_t t) {
    stopper.tokens.push_back(t);
    return stopper.tokens.size() < 3;  // stops after its third token.
  };
  batcher.Submit(std::move(r));
  const int c = batcher.Submit(Request(testing::VariedPrompt(2), 30, &cancelled, &step));
  ASSERT_TRUE(batcher.Step().ok());
  ASSERT_TRUE(batcher.Step().ok());
  batcher.Cancel(c);
  const int q = batcher.Submit(Request(testing::VariedPrompt(3), 30, &queued, &step));
  batcher.Cancel(q);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(batcher.Step().ok());
  EXPECT_EQ(stopper.tokens.size(), 3u);
  EXPECT_TRUE(stopper.done.has_value() && stopper.done->ok());
  ASSERT_TRUE(cancelled.done.has_value());
  EXPECT_TRUE(absl::IsCancelled(*cancelled.done)) << *cancelled.done;
  EXPECT_EQ(cancelled.tokens.size(), 2u);
  ASSERT_TRUE(queued.done.has_value());
  EXPECT_TRUE(absl::IsCancelled(*queued.done));
  EXPECT_TRUE(queued.tokens.empty());
  EXPECT_TRUE(batcher.idle());
  EXPECT_EQ(session->cells().used(), 0);
}

TEST_F(ContinuousBatcherTest, BadRequestsAreRefusedAtOnce) {
  auto session = Session(32);
  ContinuousBatcher batcher(*session, 16);
  Record empty, huge, none;
  int step = 0;
  batcher.Submit(Request({}, 4, &empty, &step));
  batcher.Submit(Request(testing::VariedPrompt(1), 40, &huge, &step));
  batcher.Submit(Request(testing::VariedPrompt(1), 0, &none, &step));
  ASSERT_TRUE(empty.done.has_value() && huge.done.has_value() && none.done.has_value());
  EXPECT_THAT(std::string(empty.done->message()), HasSubstr("the prompt has no tokens"));
  EXPECT_THAT(std::string(huge.done->message()),
              HasSubstr("a prompt of 9 tokens and 40 to generate need 49 cells; the cache has 32"));
  EXPECT_THAT(std::string(none.done->message()), HasSubstr("max_tokens 0 must be at least 1"));
  EXPECT_TRUE(batcher.idle());
}

}  // namespace
}  // namespace tg
