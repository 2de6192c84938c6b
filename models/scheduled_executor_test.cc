// ScheduledExecutor on the toy model (models/executor_testing.h) split over two CPU devices
// (table on one, bias on the other: two splits a graph), checked against logits computed on
// the host: a batch is cut into up to n_copies micro-batches of nearly equal size (none under
// the minimum), in order; one token, or n_copies 1, runs whole, and the next batch of its
// key runs that graph again; a failed micro-batch's error comes back after the ones in flight
// finish; greedy steps go one at a time. A session's pipelining options resolve their zeros.
#include "models/scheduled_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/executor_testing.h"

namespace tg::testing {
namespace {

class ScheduledExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = ValueOrNull(ToyModel::Create(&dev0_, &dev1_));
    ASSERT_NE(model_, nullptr);
  }

  std::unique_ptr<ScheduledExecutor> NewExecutor(int n_copies, int64_t min_micro_batch = 1) {
    Device* devices[] = {&dev0_, &dev1_};
    return ValueOrNull(ScheduledExecutor::Create(devices, n_copies, min_micro_batch));
  }

  static std::vector<int32_t> Tokens(int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 5 + 2) % kToyVocab);
    return t;
  }

  // Devices with events: greedy steps still go one at a time through the scheduler.
  EventCpuDevice dev0_{"EV0"};
  EventCpuDevice dev1_{"EV1"};
  std::unique_ptr<ToyModel> model_;
};

TEST_F(ScheduledExecutorTest, ABatchIsPipelinedInNearlyEqualMicroBatches) {
  auto e = NewExecutor(4);
  const std::vector<int32_t> tokens = Tokens(10);
  ToyBatch batch(*model_, tokens, 0);
  ASSERT_TRUE(e->Run(batch).ok());
  const std::vector<BatchPiece> want = {{0, 3}, {3, 3}, {6, 2}, {8, 2}};
  EXPECT_EQ(batch.built, want);
  EXPECT_EQ(batch.read, want);
  EXPECT_EQ(batch.fills, 4);
  ExpectHostLogits(*model_, batch, tokens);
  EXPECT_EQ(e->timings().graphs, 4);
  EXPECT_EQ(e->timings().splits, 8);
  EXPECT_GT(e->timings().transfer_us, 0);
}

TEST_F(ScheduledExecutorTest, OneTokenOrOneCopyRunsTheBatchWhole) {
  for (const auto& [n_copies, n] : {std::pair{4, 1}, {1, 10}, {1, 1}}) {
    SCOPED_TRACE(absl::StrCat("n_copies ", n_copies, " n ", n));
    auto e = NewExecutor(n_copies);
    const std::vector<int32_t> tokens = Tokens(n);
    ToyBatch batch(*model_, tokens, 0);
    ASSERT_TRUE(e->Run(batch).ok());
    EXPECT_EQ(batch.built, (std::vector<BatchPiece>{{0, n}}));
    ExpectHostLogits(*model_, batch, tokens);
    EXPECT_EQ(e->timings().graphs, 1);
    EXPECT_EQ(e->timings().splits, 2);
  }
}

// A batch run whole with the key of the last one (a decode step in the same kv block) runs
// its graph again, with the new batch's inputs; another key, or a pipelined batch in between,
// builds anew.
TEST_F(ScheduledExecutorTest, ABatchOfTheLastKeyRunsItsGraphAgain) {
  auto e = NewExecutor(4, /*min_micro_batch=*/4);
  auto run = [&](std::vector<int32_t> tokens, int64_t n_past) {
    ToyBatch batch(*model_, tokens, n_past);
    EXPECT_TRUE(e->Run(batch).ok());
    ExpectHostLogits(*model_, batch, tokens);
    return batch.built.size();
  };
  EXPECT_EQ(run({3}, 0), 1u);
  EXPECT_EQ(run({5}, 1), 0u);  // positions 0 and 1: one block of 4 cells.
  EXPECT_EQ(run({7}, 2), 0u);
  EXPECT_EQ(run({2}, 4), 1u);     // the next block: another key.
  EXPECT_EQ(run({4, 6}, 5), 1u);  // two tokens: another key.
  EXPECT_EQ(run({1}, 7), 1u);
  EXPECT_EQ(run({3}, 6), 0u);
  EXPECT_EQ(run(Tokens(8), 0), 2u);  // pipelined: two micro-batches.
  EXPECT_EQ(run({3}, 6), 1u);        // slot 0 was planned again: built anew.
  EXPECT_EQ(e->timings().graphs, 10);
}

// No micro-batch is shorter than the minimum: fewer pieces, or the batch whole.
TEST_F(ScheduledExecutorTest, MicroBatchesHoldAtLeastTheMinimum) {
  for (const auto& [n, want] : {std::pair<int, std::vector<BatchPiece>>{10, {{0, 5}, {5, 5}}},
                                {7, {{0, 7}}},
                                {17, {{0, 5}, {5, 4}, {9, 4}, {13, 4}}}}) {
    SCOPED_TRACE(absl::StrCat("n ", n));
    auto e = NewExecutor(4, /*min_micro_batch=*/4);
    const std::vector<int32_t> tokens = Tokens(n);
    ToyBatch batch(*model_, tokens, 0);
    ASSERT_TRUE(e->Run(batch).ok());
    EXPECT_EQ(batch.built, want);
    ExpectHostLogits(*model_, batch, tokens);
  }
}

TEST_F(ScheduledExecutorTest, AFailedMicroBatchFailsTheBatchAfterTheOthersFinish) {
  auto e = NewExecutor(4);
  ToyBatch failing(*model_, Tokens(8), 0);
  failing.fail_build = 3;
  EXPECT_TRUE(absl::IsInternal(e->Run(failing)));
  // The two submitted before it ran and were read; nothing after it was built.
  EXPECT_EQ(failing.built.size(), 3u);
  EXPECT_EQ(failing.read, (std::vector<BatchPiece>{{0, 2}, {2, 2}}));
  // Every slot is free again.
  const std::vector<int32_t> tokens = Tokens(8);
  ToyBatch batch(*model_, tokens, 0);
  ASSERT_TRUE(e->Run(batch).ok());
  ExpectHostLogits(*model_, batch, tokens);
}

TEST_F(ScheduledExecutorTest, GreedyStepsGoOneAtATime) {
  auto e = NewExecutor(4);
  ToyGreedy steps(*model_, *e, /*n_ctx=*/64);
  std::vector<int32_t> got = {3};
  ASSERT_TRUE(Generate(*e, steps, 9, got, /*stop_at=*/7).ok());
  EXPECT_EQ(std::vector<int32_t>(got.begin() + 1, got.end()), model_->HostChain(3, 6));
  EXPECT_EQ(steps.decoded_one, 6);
  EXPECT_EQ(steps.step_builds, 0);
  EXPECT_EQ(steps.n_past, 6);
}

// A session's pipelining options: zeros take the defaults, copies stay within the scheduler's.
TEST(PipelineOptionsTest, ZerosTakeTheDefaultsAndCopiesAreBounded) {
  const ExecutorOptions defaults = *PipelineOptions(0, 0);
  EXPECT_EQ(defaults.n_copies, kDefaultPipelineCopies);
  EXPECT_EQ(defaults.min_micro_batch, kMinMicroBatchTokens);
  const ExecutorOptions set = *PipelineOptions(2, 16);
  EXPECT_EQ(set.n_copies, 2);
  EXPECT_EQ(set.min_micro_batch, 16);
  for (int bad : {-1, kMaxSchedulerCopies + 1}) {
    const absl::StatusOr<ExecutorOptions> o = PipelineOptions(bad, 0);
    EXPECT_TRUE(absl::IsInvalidArgument(o.status())) << bad;
    EXPECT_THAT(std::string(o.status().message()), ::testing::HasSubstr("pipeline copies"));
  }
}

}  // namespace
}  // namespace tg::testing
