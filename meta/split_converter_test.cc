// SplitConverter: each conversion takes the path docs/meta.md gives (view, all-reduce in
// place or into copies, all-gather, gather then view) and is made once per tensor and state.
#include "meta/split_converter.h"

#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "gtest/gtest.h"
#include "meta/partition_testing.h"
#include "tests/lib/test_util.h"

namespace tg::meta {
namespace {

using Ranges = std::vector<AxisRange>;

class SplitConverterTest : public TwoDevicePartsTest {
 protected:
  Tensor* NewF32(std::initializer_list<int64_t> ne) { return *ctx_.NewTensor(DType::kF32, ne); }
  const std::vector<CommOp>& Comms() {
    parts_.emitter.Finish();
    EXPECT_FALSE(parts_.plan.steps.empty());
    return parts_.plan.steps.at(0).comms;
  }
};

TEST_F(SplitConverterTest, APlainPartialIsAllReducedInPlace) {
  Tensor* t = NewF32({4, 3});
  const ShadowList own = {NewF32({4, 3}), NewF32({4, 3})};
  Placement& p = parts_.Place(t, SplitState::Partial(), own);
  absl::StatusOr<const Placement*> whole = parts_.converter.Convert(t, SplitState::Mirrored());
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, &p);  // the tensor itself is mirrored now...
  EXPECT_TRUE(p.state.is_mirrored());
  EXPECT_EQ(p.version, 1);  // ...which consumers derived earlier must notice.
  ASSERT_EQ(Comms().size(), 1u);
  EXPECT_EQ(Comms()[0].kind, CommOp::Kind::kAllReduce);
  EXPECT_EQ(Comms()[0].dst, (std::vector<Tensor*>{own[0], own[1]}));
  EXPECT_EQ(Comms()[0].zero_fill, (std::vector<bool>{false, false}));
}

// A partial that is viewed stays partial for whoever reads it as such: the sum goes into
// packed copies; a device that holds nothing contributes zeros.
TEST_F(SplitConverterTest, AViewedPartialIsReducedIntoCopies) {
  Tensor* t = NewF32({4, 3});
  Tensor* s0 = NewF32({4, 3});
  Placement& p = parts_.Place(t, SplitState::Partial(), {s0, nullptr});
  p.aliased = true;
  absl::StatusOr<const Placement*> whole = parts_.converter.Convert(t, SplitState::Mirrored());
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_NE(*whole, &p);
  EXPECT_TRUE(p.state.is_partial());
  EXPECT_TRUE((*whole)->detached);
  const CommOp& op = Comms().at(0);
  EXPECT_EQ(op.zero_fill, (std::vector<bool>{false, true}));
  Tensor* copy = op.dst[0];
  EXPECT_NE(copy, s0);
  const std::vector<Tensor*>& scheduled = parts_.plan.steps[0].graphs[0].nodes;
  ASSERT_EQ(scheduled.size(), 1u);
  EXPECT_EQ(scheduled[0]->op, Op::kCpy);
  EXPECT_EQ(scheduled[0]->src[0], s0);
  EXPECT_EQ(scheduled[0]->src[1], copy);
  EXPECT_EQ(ShapeOf(op.dst[1]), ShapeOf(t));
  EXPECT_EQ((*whole)->shadows[1], op.dst[1]);
}

TEST_F(SplitConverterTest, ASplitIsGatheredOnceForAllItsConsumers) {
  Tensor* t = NewF32({8, 6});
  const SplitState cut = SplitState::Axis(1, Ranges{{0, 2}, {2, 6}});
  parts_.Place(t, cut, {NewF32({8, 2}), NewF32({8, 4})});
  absl::StatusOr<const Placement*> first = parts_.converter.Convert(t, SplitState::Mirrored());
  absl::StatusOr<const Placement*> second = parts_.converter.Convert(t, SplitState::Mirrored());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);
  ASSERT_EQ(Comms().size(), 1u);
  const CommOp& op = Comms()[0];
  EXPECT_EQ(op.kind, CommOp::Kind::kAllGather);
  EXPECT_EQ(op.state, cut);
  EXPECT_EQ(ShapeOf(op.full), ShapeOf(t));
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(ShapeOf(op.dst[d]), ShapeOf(t));
    EXPECT_EQ((*first)->shadows[d], op.dst[d]);
  }
}

TEST_F(SplitConverterTest, AnotherCutIsAGatherThenViews) {
  Tensor* t = NewF32({8, 6});
  parts_.Place(t, SplitState::Axis(1, Ranges{{0, 2}, {2, 6}}), {NewF32({8, 2}), NewF32({8, 4})});
  const SplitState rows = SplitState::Axis(0, Ranges{{0, 3}, {3, 8}});
  absl::StatusOr<const Placement*> cut = parts_.converter.Convert(t, rows);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ((*cut)->state, rows);
  ASSERT_EQ(Comms().size(), 1u);
  for (int d = 0; d < 2; ++d) EXPECT_EQ((*cut)->shadows[d]->view_src, Comms()[0].dst[d]);
  EXPECT_EQ(ShapeOf((*cut)->shadows[1]), (std::vector<int64_t>{5, 6, 1, 1}));
}

TEST_F(SplitConverterTest, AWholeTensorIsCutByViewsAlone) {
  Tensor* t = NewF32({8, 6});
  const ShadowList whole = {NewF32({8, 6}), NewF32({8, 6})};
  parts_.Place(t, SplitState::Mirrored(), whole);
  absl::StatusOr<const Placement*> cut =
      parts_.converter.Convert(t, SplitState::Axis(1, Ranges{{0, 1}, {1, 6}}));
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ((*cut)->shadows[1]->view_src, whole[1]);
  EXPECT_EQ(parts_.plan.comm_count, 0);
}

TEST_F(SplitConverterTest, UnsupportedConversionsAreErrors) {
  Tensor* q = *ctx_.NewTensor(DType::kF16, {4, 3});
  parts_.Place(q, SplitState::Partial(), {nullptr, nullptr});
  absl::StatusOr<const Placement*> r = parts_.converter.Convert(q, SplitState::Mirrored());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("all-reduce"), std::string::npos) << r.status();

  Tensor* t = NewF32({8, 6});
  parts_.Place(t, SplitState::Mirrored(), {NewF32({8, 6}), NewF32({8, 6})});
  const SplitState seg = SplitState::Segmented(1, {{{0, 2}, {4, 5}}, {{2, 4}, {5, 6}}});
  r = parts_.converter.Convert(t, seg);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("cutting"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace tg::meta
