// PlanEmitter: collectives cut the schedule into steps; views and private tensors are listed
// per device; private tensors get disjoint, aligned, zeroed memory, kept across runs.
#include "meta/plan_emitter.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
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
  ASSERT_TRUE(emitter.Finish(lookup_).ok());
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
  ASSERT_TRUE(again.Finish(lookup_).ok());
  ASSERT_EQ(plan_.steps.size(), 1u);
  EXPECT_TRUE(Nodes(plan_.steps[0], 0).empty());
  EXPECT_TRUE(Nodes(plan_.steps[0], 1).empty());
  EXPECT_EQ(plan_.steps[0].comms.size(), 1u);
  EXPECT_EQ(plan_.comm_count, 1);
}

TEST_F(PlanEmitterTest, ViewsAreListedForRepointing) {
  Tensor* base = NewF32({8});
  Tensor* view = *View(ctx_, base, {4}, {}, 4 * sizeof(float));
  PlanEmitter emitter(&plan_, 2);
  emitter.Emit(1, base);
  emitter.Emit(1, view);
  ASSERT_TRUE(emitter.Finish(lookup_).ok());
  EXPECT_TRUE(plan_.views[0].empty());
  EXPECT_EQ(plan_.views[1], std::vector<Tensor*>{view});
}

TEST_F(PlanEmitterTest, PrivateTensorsGetDisjointZeroedMemory) {
  std::vector<Tensor*> mine = {NewF32({3}), NewF32({17, 2}), NewF32({1})};
  Tensor* other = NewF32({5});
  for (int run = 0; run < 2; ++run) {
    PlanEmitter emitter(&plan_, 2);
    for (Tensor* t : mine) emitter.AddPrivate(0, t);
    emitter.AddPrivate(1, other);
    ASSERT_TRUE(emitter.Finish(lookup_).ok());
    const Buffer* buffer0 = plan_.extra_buffers[0].get();
    ASSERT_NE(buffer0, nullptr);
    EXPECT_EQ(other->buffer, plan_.extra_buffers[1].get());
    const size_t align = a_.default_buffer_type()->alignment();
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (Tensor* t : mine) {
      EXPECT_EQ(t->buffer, buffer0);
      const auto start = reinterpret_cast<uintptr_t>(t->data);
      EXPECT_EQ(start % align, 0u);
      ranges.emplace_back(start, start + t->NumBytes());
      std::vector<float> got(t->NumElements(), 1.0f);
      ASSERT_TRUE(t->buffer->GetTensor(t, got.data(), 0, t->NumBytes()).ok());
      EXPECT_EQ(got, std::vector<float>(got.size(), 0.0f)) << "run " << run;
      // Dirty it: the next run must see zeros again (zero partials stay zero).
      std::vector<float> junk(t->NumElements(), 7.0f);
      ASSERT_TRUE(t->buffer->SetTensor(t, junk.data(), 0, t->NumBytes()).ok());
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  }
}

TEST_F(PlanEmitterTest, PrivateMemoryIsKeptWhileLargeEnough) {
  Tensor* small = NewF32({16});
  Tensor* large = NewF32({4096});
  auto run = [&](Tensor* t) -> const Buffer* {
    PlanEmitter emitter(&plan_, 2);
    emitter.AddPrivate(0, t);
    EXPECT_TRUE(emitter.Finish(lookup_).ok());
    return plan_.extra_buffers[0].get();
  };
  const Buffer* first = run(large);
  EXPECT_EQ(run(small), first);
  EXPECT_EQ(small->buffer, first);
  EXPECT_GE(run(NewF32({8192}))->size(), 8192 * sizeof(float));
}

}  // namespace
}  // namespace tg::meta
