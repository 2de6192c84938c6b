// PlanEmitter: collectives cut the schedule into steps; views go to their device's subgraph;
// the plan's own tensors and zeros are listed per device (their memory: plan_memory_test).
#include "meta/plan_emitter.h"

#include <vector>

#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "meta/partition_testing.h"

namespace tg::meta {
namespace {

class PlanEmitterTest : public ::testing::Test {
 protected:
  PlanEmitterTest() : a_("A", "a", 1), b_("B", "b", 1), lookup_({&a_, &b_}) {}

  Tensor* NewF32(std::initializer_list<int64_t> ne) { return *ctx_.NewTensor(DType::kF32, ne); }
  static std::vector<Tensor*> Nodes(const PlanStep& step, int d) { return step.graphs[d].nodes; }

  cpu::CpuDevice a_;
  cpu::CpuDevice b_;
  FakeShadowLookup lookup_;
  Context ctx_;
  PartitionPlan plan_;
};

TEST_F(PlanEmitterTest, CollectivesCutTheSteps) {
  Tensor* x0 = NewF32({4});
  Tensor* x1 = NewF32({4});
  Tensor* y0 = NewF32({4});
  PlanEmitter emitter(&plan_, 2);
  emitter.Emit(0, x0);
  emitter.Emit(1, x1);
  CommOp op;
  op.dst = {x0, x1};
  emitter.EmitComm(op);
  emitter.Emit(0, y0);
  emitter.Finish();
  ASSERT_EQ(plan_.steps.size(), 2u);
  EXPECT_EQ(Nodes(plan_.steps[0], 0), std::vector<Tensor*>{x0});
  EXPECT_EQ(Nodes(plan_.steps[0], 1), std::vector<Tensor*>{x1});
  ASSERT_EQ(plan_.steps[0].comms.size(), 1u);
  EXPECT_EQ(plan_.steps[0].comms[0].dst, (std::vector<Tensor*>{x0, x1}));
  EXPECT_EQ(Nodes(plan_.steps[1], 0), std::vector<Tensor*>{y0});
  EXPECT_TRUE(Nodes(plan_.steps[1], 1).empty());
  EXPECT_TRUE(plan_.steps[1].comms.empty());
  EXPECT_EQ(plan_.comm_count, 1);

  // A later run starting with a collective: it belongs to a first step with no nodes, and
  // what the earlier run scheduled is gone.
  PlanEmitter again(&plan_, 2);
  CommOp first;
  first.dst = {x0, x1};
  again.EmitComm(first);
  again.Finish();
  ASSERT_EQ(plan_.steps.size(), 1u);
  EXPECT_TRUE(Nodes(plan_.steps[0], 0).empty());
  EXPECT_TRUE(Nodes(plan_.steps[0], 1).empty());
  EXPECT_EQ(plan_.steps[0].comms.size(), 1u);
  EXPECT_EQ(plan_.comm_count, 1);
}

// Views are scheduled on their device like any node (the memory layout points them at their
// base: plan_memory_test).
TEST_F(PlanEmitterTest, ViewsGoToTheirDevicesSubgraph) {
  Tensor* base = NewF32({8});
  Tensor* view = *View(ctx_, base, {4}, {}, 4 * sizeof(float));
  PlanEmitter emitter(&plan_, 2);
  emitter.Emit(1, base);
  emitter.Emit(1, view);
  emitter.Finish();
  ASSERT_EQ(plan_.steps.size(), 1u);
  EXPECT_TRUE(Nodes(plan_.steps[0], 0).empty());
  EXPECT_EQ(Nodes(plan_.steps[0], 1), (std::vector<Tensor*>{base, view}));
}

TEST_F(PlanEmitterTest, PrivateTensorsAndZerosAreListedPerDeviceEachRun) {
  std::vector<Tensor*> mine = {NewF32({3}), NewF32({17, 2}), NewF32({1})};
  Tensor* other = NewF32({5});
  Tensor* zeros = NewF32({4});
  for (int run = 0; run < 2; ++run) {
    PlanEmitter emitter(&plan_, 2);
    for (Tensor* t : mine) emitter.AddPrivate(0, t);
    emitter.AddPrivate(1, other);
    emitter.AddZeros(1, zeros);
    emitter.Finish();
    EXPECT_EQ(plan_.extras[0], mine) << "run " << run;  // not accumulated over runs.
    EXPECT_EQ(plan_.extras[1], std::vector<Tensor*>{other});
    EXPECT_TRUE(plan_.zeros[0].empty());
    EXPECT_EQ(plan_.zeros[1], std::vector<Tensor*>{zeros});
  }
}

}  // namespace
}  // namespace tg::meta
