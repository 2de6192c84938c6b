// SingleDeviceExecutor on the toy model (models/executor_testing.h), checked against logits
// and argmax chains computed on the host: a batch of the key of the last graph runs it again
// with its own inputs, any other builds anew; greedy steps are queued ahead in Stream batches
// on a device with events and one at a time without; CreateEvent errors other than
// UNIMPLEMENTED fail Create.
#include "models/single_device_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "models/executor_testing.h"

namespace tg::testing {
namespace {

class SingleDeviceExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = ValueOrNull(ToyModel::Create(&device_, &device_));
    ASSERT_NE(model_, nullptr);
  }

  std::unique_ptr<SingleDeviceExecutor> NewExecutor(int greedy_batch = 1) {
    return ValueOrNull(SingleDeviceExecutor::Create(&device_, greedy_batch));
  }

  // Runs `tokens` at n_past and checks every row's logits against the host's.
  void RunAndCheck(Executor& e, const std::vector<int32_t>& tokens, int64_t n_past,
                   int expected_builds) {
    SCOPED_TRACE(absl::StrCat("batch of ", tokens.size(), " at ", n_past));
    ToyBatch batch(*model_, tokens, n_past);
    ASSERT_TRUE(e.Run(batch).ok());
    EXPECT_EQ(static_cast<int>(batch.built.size()), expected_builds);
    EXPECT_EQ(batch.fills, 1);
    ExpectHostLogits(*model_, batch, tokens);
  }

  EventCpuDevice device_{"EV"};
  std::unique_ptr<ToyModel> model_;
};

TEST_F(SingleDeviceExecutorTest, ABatchOfTheLastGraphsKeyRunsItWithItsOwnInputs) {
  auto e = NewExecutor();
  RunAndCheck(*e, {1, 2}, 0, 1);  // n_kv 4.
  RunAndCheck(*e, {5, 6}, 2, 0);  // n_kv 4 again: the same graph, new tokens.
  RunAndCheck(*e, {7}, 2, 1);     // one token: another shape.
  RunAndCheck(*e, {3}, 3, 0);     // n_kv 4.
  RunAndCheck(*e, {0}, 4, 1);     // n_kv 8: the next block.
  RunAndCheck(*e, {4, 3}, 6, 1);  // two tokens, n_kv 8.
  ToyBatch picks(*model_, {4, 3}, 6, GraphOutput::kArgmax);  // same size and n_kv: output differs.
  ASSERT_TRUE(e->Run(picks).ok());
  EXPECT_EQ(picks.built.size(), 1u);
  EXPECT_EQ(picks.argmax, (std::vector<int32_t>{model_->HostArgmax(4), model_->HostArgmax(3)}));
  EXPECT_EQ(e->timings().graphs, 7);
  EXPECT_EQ(e->timings().splits, 7);
}

TEST_F(SingleDeviceExecutorTest, AGraphWithANodeTheDeviceCannotComputeIsRefusedUncomputed) {
  device_.refused_op = Op::kArgmax;
  auto e = NewExecutor();
  RunAndCheck(*e, {1, 2}, 0, 1);  // logits only: no ARGMAX node.
  const int computes = device_.computes;
  ToyBatch picks(*model_, {4, 3}, 2, GraphOutput::kArgmax);
  const absl::Status s = e->Run(picks);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("EV has no kernel for"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("ARGMAX"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("-sm layer"));
  EXPECT_EQ(device_.computes, computes);
  device_.refused_op = Op::kNone;  // the refused graph was not kept: the next run builds it.
  ToyBatch again(*model_, {4, 3}, 2, GraphOutput::kArgmax);
  ASSERT_TRUE(e->Run(again).ok());
  EXPECT_EQ(again.built.size(), 1u);
  EXPECT_EQ(again.argmax, (std::vector<int32_t>{model_->HostArgmax(4), model_->HostArgmax(3)}));
}

TEST_F(SingleDeviceExecutorTest, AFailedBuildLeavesNoGraphToRunAgain) {
  auto e = NewExecutor();
  RunAndCheck(*e, {1, 2}, 0, 1);
  ToyBatch failing(*model_, {3}, 0);
  failing.fail_build = 1;
  EXPECT_TRUE(absl::IsInternal(e->Run(failing)));
  EXPECT_TRUE(failing.read.empty());
  RunAndCheck(*e, {5, 6}, 2, 1);  // the key of the first graph, which is gone.
}

TEST_F(SingleDeviceExecutorTest, CreateEventErrorsOtherThanUnimplementedFailCreate) {
  EventCpuDevice internal("EVI", absl::InternalError("no event pool"));
  absl::StatusOr<std::unique_ptr<SingleDeviceExecutor>> e =
      SingleDeviceExecutor::Create(&internal, 1);
  ASSERT_TRUE(absl::IsInternal(e.status())) << e.status();
  EXPECT_THAT(e.status().message(), ::testing::HasSubstr("no event pool"));
  EXPECT_THAT(e.status().message(), ::testing::HasSubstr("EVI"));

  EventCpuDevice unimplemented("EVU", absl::UnimplementedError("events not supported"));
  e = SingleDeviceExecutor::Create(&unimplemented, 1);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE((*e)->queues_greedy_ahead());

  cpu::CpuDevice cpu("CPU", "cpu:0", 1);  // the default CreateEvent: UNIMPLEMENTED.
  e = SingleDeviceExecutor::Create(&cpu, 0);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE((*e)->queues_greedy_ahead());

  EXPECT_TRUE(NewExecutor()->queues_greedy_ahead());
}

// Steps fed back on the device, in Stream batches of at most greedy_batch steps (0: sized by
// the measured step time), produce the host's chain; one graph per block of 4 positions.
TEST_F(SingleDeviceExecutorTest, GreedyStepsQueuedAheadPickTheHostsChain) {
  for (int greedy_batch : {1, 3, 16, 0}) {
    SCOPED_TRACE(absl::StrCat("greedy_batch ", greedy_batch));
    device_.batch_computes.clear();
    auto e = NewExecutor(greedy_batch);
    ToyGreedy steps(*model_, *e, /*n_ctx=*/64);
    ASSERT_NO_FATAL_FAILURE(
        ExpectGenerationEnds(*model_, *e, steps, 2, 30, absl::StatusCode::kOk, 30));
    EXPECT_EQ(steps.decoded_one, 0);
    EXPECT_EQ(steps.step_builds, 8);  // positions 0..29: n_kv 4, 8, ..., 32.
    int sent = 0;
    for (int n : device_.batch_computes) {
      EXPECT_LE(n, greedy_batch == 0 ? kMaxGreedyBatch : greedy_batch);
      sent += n;
    }
    EXPECT_EQ(sent, 30);  // the last pick is not decoded, and nothing beyond max_tokens.
    EXPECT_EQ(e->timings().graphs, 30);
  }
}

// With batches of one step, the next goes out before the host waits for a pick: a step is
// decoded while the one before it comes back (over a link, its round trip is hidden).
TEST_F(SingleDeviceExecutorTest, BatchesOfOneStepKeepTwoStepsInFlight) {
  auto e = NewExecutor(1);
  ToyGreedy steps(*model_, *e, /*n_ctx=*/64);
  const int before = device_.computes;
  ASSERT_NO_FATAL_FAILURE(
      ExpectGenerationEnds(*model_, *e, steps, 2, 30, absl::StatusCode::kOk, 30));
  // The k-th wait (from 0) is for step k: the steps computed by then, less the k handed
  // over, were in flight. A step that starts a graph (every 4 positions) waits for the rest.
  int two = 0;
  for (size_t k = 0; k < device_.computes_at_wait.size(); ++k) {
    const int in_flight = device_.computes_at_wait[k] - before - static_cast<int>(k);
    EXPECT_GE(in_flight, 1) << "wait " << k;
    EXPECT_LE(in_flight, 2) << "wait " << k;
    two += in_flight == 2 ? 1 : 0;
  }
  EXPECT_EQ(device_.computes_at_wait.size(), 30u);
  EXPECT_GE(two, 20);
}

TEST_F(SingleDeviceExecutorTest, StoppingEarlyAdvancesByThePicksHandedOver) {
  auto e = NewExecutor(16);
  ToyGreedy steps(*model_, *e, /*n_ctx=*/64);
  std::vector<int32_t> got = {5};
  ASSERT_TRUE(Generate(*e, steps, 40, got, /*stop_at=*/8).ok());
  ASSERT_EQ(got.size(), 8u);
  EXPECT_EQ(steps.n_past, 7);
  // Going on continues the chain from the last pick: the discarded steps left nothing.
  ASSERT_TRUE(Generate(*e, steps, 10, got).ok());
  EXPECT_EQ(got, model_->HostChainFrom(5, 17));
  EXPECT_EQ(steps.n_past, 17);
}

TEST_F(SingleDeviceExecutorTest, AFullContextEndsWithOutOfRangeAfterEveryPositionIsUsed) {
  for (int greedy_batch : {1, 3, 0}) {
    SCOPED_TRACE(absl::StrCat("greedy_batch ", greedy_batch));
    auto e = NewExecutor(greedy_batch);
    ToyGreedy steps(*model_, *e, /*n_ctx=*/10);
    ExpectGenerationEnds(*model_, *e, steps, 1, 100, absl::StatusCode::kOutOfRange, 10);
  }
}

TEST_F(SingleDeviceExecutorTest, AWaitErrorIsReturnedAfterThePicksBeforeIt) {
  auto e = NewExecutor(3);
  device_.fail_wait = 5;
  ToyGreedy steps(*model_, *e, /*n_ctx=*/64);
  ExpectGenerationEnds(*model_, *e, steps, 6, 20, absl::StatusCode::kInternal, 4);
}

TEST_F(SingleDeviceExecutorTest, WithoutEventsGreedyStepsGoOneAtATime) {
  cpu::CpuDevice cpu("CPU", "cpu:0", 1);
  auto model = *ToyModel::Create(&cpu, &cpu);
  auto e = *SingleDeviceExecutor::Create(&cpu, 0);
  ToyGreedy steps(*model, *e, /*n_ctx=*/64);
  ASSERT_NO_FATAL_FAILURE(
      ExpectGenerationEnds(*model_, *e, steps, 3, 12, absl::StatusCode::kOk, 12));
  EXPECT_EQ(steps.decoded_one, 12);
  EXPECT_EQ(steps.step_builds, 0);
}

}  // namespace
}  // namespace tg::testing
