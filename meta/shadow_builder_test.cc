// ShadowBuilder: shadows have each device's slice shape, a missing addend of a partial sum
// becomes zeros, strided sources are packed where an op refuses them, views and slices
// address the right bytes of the whole.
#include "meta/shadow_builder.h"

#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "meta/partition_testing.h"
#include "meta/plan_memory.h"
#include "tests/lib/test_util.h"

namespace tg::meta {
namespace {

using Ranges = std::vector<AxisRange>;

class ShadowBuilderTest : public ::testing::Test {
 protected:
  ShadowBuilderTest() { Start(2); }

  void Start(int n) {
    parts_ = std::make_unique<PartitionParts>(n, testing::CpuDevice());
    plan_ = &parts_->plan;
    builder_ = &parts_->shadows;
  }

  Tensor* NewF32(std::initializer_list<int64_t> ne) { return *ctx_.NewTensor(DType::kF32, ne); }
  // A [rows, cols] tensor that is not contiguous: the transpose of a [cols, rows] one.
  Tensor* Strided(int64_t rows, int64_t cols) { return *Transpose(ctx_, NewF32({cols, rows})); }
  std::vector<Tensor*> Scheduled(int d) {
    parts_->emitter.Finish();
    return plan_->steps.empty() ? std::vector<Tensor*>{} : plan_->steps[0].graphs[d].nodes;
  }

  std::unique_ptr<PartitionParts> parts_;
  PartitionPlan* plan_ = nullptr;
  ShadowBuilder* builder_ = nullptr;
  Context ctx_;
};

TEST_F(ShadowBuilderTest, BlankShadowsTakeEachDevicesSlice) {
  Start(3);
  Tensor* act = NewF32({8, 6});
  act->SetName("act");
  act->flags |= kFlagInput;
  const SplitState cut = SplitState::Axis(1, Ranges{{0, 2}, {2, 2}, {2, 6}});
  absl::StatusOr<ShadowList> s = builder_->Blank(*act, cut);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ(ShapeOf((*s)[0]), (std::vector<int64_t>{8, 2, 1, 1}));
  EXPECT_EQ((*s)[1], nullptr);
  EXPECT_EQ(ShapeOf((*s)[2]), (std::vector<int64_t>{8, 4, 1, 1}));
  EXPECT_STREQ((*s)[2]->name, "act#2");
  EXPECT_TRUE((*s)[0]->HasFlag(kFlagInput));
  EXPECT_TRUE(Scheduled(0).empty());  // no memory of their own: nothing to compute.
}

TEST_F(ShadowBuilderTest, NodeShadowsHaveTheSliceShapeAndAreScheduled) {
  Tensor* mm = *MulMat(ctx_, NewF32({8, 6}), NewF32({8, 3}));  // [6, 3]
  const ShadowList w = {NewF32({8, 2}), NewF32({8, 4})};
  const ShadowList x = {NewF32({8, 3}), NewF32({8, 3})};
  const ShadowList* srcs[kMaxSrc] = {&w, &x};
  const SplitState rows = SplitState::Axis(0, Ranges{{0, 2}, {2, 6}});
  absl::StatusOr<ShadowList> s = builder_->Node(*mm, rows, srcs);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(ShapeOf((*s)[0]), (std::vector<int64_t>{2, 3, 1, 1}));
  EXPECT_EQ(ShapeOf((*s)[1]), (std::vector<int64_t>{4, 3, 1, 1}));
  EXPECT_EQ((*s)[1]->src[0], w[1]);
  EXPECT_EQ((*s)[1]->src[1], x[1]);
  EXPECT_EQ(Scheduled(0), std::vector<Tensor*>{(*s)[0]});
  EXPECT_EQ(Scheduled(1), std::vector<Tensor*>{(*s)[1]});

  // Shadows that do not give the slice the state says are an error, not a wrong plan.
  const ShadowList wrong = {NewF32({8, 3}), NewF32({8, 3})};
  const ShadowList* bad[kMaxSrc] = {&wrong, &x};
  absl::StatusOr<ShadowList> e = builder_->Node(*mm, rows, bad);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(e.status().message().find("needs 2x3x1x1"), std::string::npos) << e.status();
}

TEST_F(ShadowBuilderTest, AMissingAddendOfAPartialSumIsZeros) {
  Tensor* add = *Add(ctx_, NewF32({4, 3}), NewF32({4, 3}));
  const ShadowList a = {NewF32({4, 3}), nullptr};
  const ShadowList b = {NewF32({4, 3}), NewF32({4, 3})};
  const ShadowList* srcs[kMaxSrc] = {&a, &b};
  absl::StatusOr<ShadowList> s = builder_->Node(*add, SplitState::Partial(), srcs);
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor* zeros = (*s)[1]->src[0];
  ASSERT_NE(zeros, nullptr);
  EXPECT_EQ((*s)[1]->src[1], b[1]);
  EXPECT_EQ(plan_->zeros[1], std::vector<Tensor*>{zeros});
  EXPECT_TRUE(plan_->extras[1].empty());
  parts_->emitter.Finish();
  PlanMemory memory(
      {testing::CpuDevice()->default_buffer_type(), testing::CpuDevice()->default_buffer_type()});
  ASSERT_TRUE(memory.Place(*plan_).ok());
  std::vector<float> got(zeros->NumElements(), 1.0f);
  ASSERT_TRUE(zeros->buffer->GetTensor(zeros, got.data(), 0, zeros->NumBytes()).ok());
  EXPECT_EQ(got, std::vector<float>(12, 0.0f));
}

TEST_F(ShadowBuilderTest, AMissingFactorContributesNothing) {
  Tensor* mm = *MulMat(ctx_, NewF32({8, 6}), NewF32({8, 3}));
  const ShadowList w = {NewF32({4, 6}), nullptr};  // device 1 holds none of K.
  const ShadowList x = {NewF32({4, 3}), NewF32({0, 3})};
  const ShadowList* srcs[kMaxSrc] = {&w, &x};
  absl::StatusOr<ShadowList> s = builder_->Node(*mm, SplitState::Partial(), srcs);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE((*s)[0], nullptr);
  EXPECT_EQ((*s)[1], nullptr);
  EXPECT_TRUE(Scheduled(1).empty());

  // A split (not partial) result cannot do without a source.
  absl::StatusOr<ShadowList> e = builder_->Node(*mm, SplitState::Mirrored(), srcs);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(e.status().message().find("device 1 lacks a source"), std::string::npos) << e.status();
}

TEST_F(ShadowBuilderTest, StridedSourcesArePackedWhereTheOpRefusesThem) {
  Tensor* mm = *MulMat(ctx_, NewF32({4, 6}), NewF32({4, 3}));
  Tensor* strided = Strided(4, 6);  // MUL_MAT wants the weight's rows packed.
  const ShadowList w = {strided, NewF32({4, 6})};
  const ShadowList x = {NewF32({4, 3}), NewF32({4, 3})};
  const ShadowList* srcs[kMaxSrc] = {&w, &x};
  absl::StatusOr<ShadowList> s = builder_->Node(*mm, SplitState::Mirrored(), srcs);
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor* packed = (*s)[0]->src[0];
  EXPECT_EQ(packed->op, Op::kCont);
  EXPECT_EQ(packed->src[0], strided);
  EXPECT_EQ(plan_->extras[0], std::vector<Tensor*>{packed});
  EXPECT_EQ((*s)[1]->src[0], w[1]);  // already packed: used as is.
  EXPECT_EQ(Scheduled(0), (std::vector<Tensor*>{packed, (*s)[0]}));
}

TEST_F(ShadowBuilderTest, ReshapePacksStridedShadows) {
  Tensor* r = *Reshape(ctx_, NewF32({4, 6}), {24});
  const ShadowList src = {Strided(4, 6), NewF32({4, 6})};
  bool packed = false;
  absl::StatusOr<ShadowList> s = builder_->Reshape(*r, SplitState::Mirrored(), src, &packed);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(packed);
  EXPECT_EQ((*s)[0]->src[0]->op, Op::kCont);
  EXPECT_EQ((*s)[1]->src[0], src[1]);
  EXPECT_EQ(ShapeOf((*s)[1]), (std::vector<int64_t>{24, 1, 1, 1}));
}

// A view is addressed from its root (view_offs is absolute), based on the source's shadow
// where that is a view of the same root at or before it.
TEST_F(ShadowBuilderTest, ViewsAddressTheRootsBytes) {
  const ShadowList root = {NewF32({16, 4}), NewF32({16, 4})};
  Tensor* before = *View(ctx_, root[0], {8, 4}, {root[0]->nb[1]}, 4 * sizeof(float));
  const ShadowList src = {before, nullptr};
  ViewSplit mapped;
  mapped.state = SplitState::Axis(0, Ranges{{0, 4}, {4, 8}});
  mapped.slices.resize(2);
  for (ViewSlice& v : mapped.slices) {
    v = ViewSlice{{4, 4, 1, 1}, {4, 64, 256, 256}, 8 * sizeof(float), false};
  }
  absl::StatusOr<ShadowList> s = builder_->View(*before, &mapped, root, src);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)[0]->src[0], before);
  EXPECT_EQ((*s)[1]->src[0], root[1]);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ((*s)[d]->view_src, root[d]);
    EXPECT_EQ((*s)[d]->view_offs, 8 * sizeof(float));
    EXPECT_EQ(ShapeOf((*s)[d]), (std::vector<int64_t>{4, 4, 1, 1}));
  }
}

TEST_F(ShadowBuilderTest, SlicesCutTheWholeCopies) {
  const ShadowList whole = {NewF32({8, 6}), NewF32({8, 6})};
  absl::StatusOr<ShadowList> rows =
      builder_->Slice(SplitState::Axis(0, Ranges{{0, 3}, {3, 8}}), whole);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(ShapeOf((*rows)[1]), (std::vector<int64_t>{5, 6, 1, 1}));
  EXPECT_EQ((*rows)[1]->view_offs, 3 * sizeof(float));
  EXPECT_EQ((*rows)[1]->nb[1], 8 * sizeof(float));
  absl::StatusOr<ShadowList> cols =
      builder_->Slice(SplitState::Axis(1, Ranges{{0, 2}, {2, 6}}), whole);
  ASSERT_TRUE(cols.ok()) << cols.status();
  EXPECT_EQ(ShapeOf((*cols)[1]), (std::vector<int64_t>{8, 4, 1, 1}));
  EXPECT_EQ((*cols)[1]->view_offs, 2 * 8 * sizeof(float));
  EXPECT_EQ((*cols)[0]->view_offs, 0u);
}

}  // namespace
}  // namespace tg::meta
