// FallbackExecutor on the toy model (models/executor_testing.h) with a device that refuses
// ARGMAX, as a GPU without a kernel does: logits graphs run on the device alone; the first
// refused graph moves every graph to the scheduler over the device and a CPU, whose results
// are checked against the host's; greedy generation refused at its first step starts over
// there and gives the host's chain; a device that refuses nothing keeps its steps queued ahead.
#include "models/fallback_executor.h"

#include <gtest/gtest.h>

#include <vector>

#include "models/executor_testing.h"

namespace tg::testing {
namespace {

class FallbackExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_.refused_op = Op::kArgmax;
    model_ = ValueOrNull(ToyModel::Create(&device_, &device_));
    ASSERT_NE(model_, nullptr);
  }

  std::unique_ptr<FallbackExecutor> NewExecutor() {
    return ValueOrNull(
        FallbackExecutor::Create(&device_, &cpu_, {.n_copies = 1, .greedy_batch = 2}));
  }

  EventCpuDevice device_{"GPU"};
  EventCpuDevice cpu_{"HOST"};
  std::unique_ptr<ToyModel> model_;
};

TEST_F(FallbackExecutorTest, ARefusedGraphAndEveryLaterOneRunWithTheCpu) {
  auto e = NewExecutor();
  ToyBatch logits(*model_, {1, 2}, 0);
  ASSERT_TRUE(e->Run(logits).ok());
  ExpectHostLogits(*model_, logits, {1, 2});
  EXPECT_FALSE(e->fell_back());
  EXPECT_EQ(cpu_.computes, 0);
  EXPECT_EQ(e->timings().fallback_graphs, 0);

  ToyBatch picks(*model_, {4, 3}, 2, GraphOutput::kArgmax);
  const absl::Status s = e->Run(picks);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(e->fell_back());
  EXPECT_EQ(picks.argmax, (std::vector<int32_t>{model_->HostArgmax(4), model_->HostArgmax(3)}));
  EXPECT_GT(cpu_.computes, 0);  // the ARGMAX ran there.

  ToyBatch again(*model_, {6, 0}, 4);
  ASSERT_TRUE(e->Run(again).ok());
  ExpectHostLogits(*model_, again, {6, 0});
  EXPECT_EQ(e->timings().graphs, 3);  // one on the device alone, two scheduled.
  // The report says how many needed the CPU and why (the device's refusal).
  EXPECT_EQ(e->timings().fallback_graphs, 2);
  EXPECT_FALSE(e->timings().fallback_reason.empty());
}

TEST_F(FallbackExecutorTest, GenerationRefusedAtItsFirstStepStartsOverWithTheCpu) {
  auto e = NewExecutor();
  ToyGreedy steps(*model_, *e, 64);
  ASSERT_NO_FATAL_FAILURE(
      ExpectGenerationEnds(*model_, *e, steps, 1, 12, absl::StatusCode::kOk, 12));
  EXPECT_TRUE(e->fell_back());
}

TEST_F(FallbackExecutorTest, ADeviceThatRefusesNothingQueuesStepsAheadAlone) {
  device_.refused_op = Op::kNone;
  auto e = NewExecutor();
  ToyGreedy steps(*model_, *e, 64);
  ASSERT_NO_FATAL_FAILURE(ExpectGenerationEnds(*model_, *e, steps, 2, 8, absl::StatusCode::kOk, 8));
  EXPECT_FALSE(e->fell_back());
  EXPECT_FALSE(device_.batch_computes.empty());
  EXPECT_EQ(cpu_.computes, 0);
}

TEST_F(FallbackExecutorTest, TheCpuMustBeAnotherDevice) {
  auto e = FallbackExecutor::Create(&device_, &device_, {});
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  e = FallbackExecutor::Create(&device_, nullptr, {});
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tg::testing
