// StateDeriver: node states follow the rules of docs/meta.md (matmul by rows then columns,
// reshapes and views that keep a head cut, permutes that move it), sources are converted
// where a rule needs it, and writes into copies are refused.
#include "meta/state_deriver.h"

#include <memory>
#include <vector>

#include "core/context.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "meta/partition_testing.h"
#include "tests/lib/test_util.h"

namespace tg::meta {
namespace {

using Ranges = std::vector<AxisRange>;

class StateDeriverTest : public TwoDevicePartsTest {
 protected:
  // A leaf in `state` with blank shadows.
  Tensor* Leaf(std::initializer_list<int64_t> ne, const SplitState& state) {
    Tensor* t = *ctx_.NewTensor(DType::kF32, ne);
    parts_.Place(t, state, *parts_.shadows.Blank(*t, state));
    return t;
  }
  // Derives node (its sources registered already) and returns its placement.
  const Placement& Derive(absl::StatusOr<Tensor*> node) {
    EXPECT_TRUE(node.ok()) << node.status();
    Placement& p = parts_.placements.Add(*node);
    absl::Status s = parts_.deriver.Derive(*node, &p);
    EXPECT_TRUE(s.ok()) << s;
    return p;
  }
};

// y = W2 (W1 x) + x: W1 cut by rows cuts y along dim 0, W2 cut by columns makes a PARTIAL,
// and the residual add all-reduces it: one collective.
TEST_F(StateDeriverTest, RowsThenColumnsThenOneAllReduce) {
  const Ranges hidden{{0, 4}, {4, 12}};
  Tensor* w1 = Leaf({8, 12}, SplitState::Axis(1, hidden));
  Tensor* w2 = Leaf({12, 8}, SplitState::Axis(0, hidden));
  Tensor* x = Leaf({8, 3}, SplitState::Mirrored());
  Tensor* y = *MulMat(ctx_, w1, x);
  const Placement& yp = Derive(y);
  EXPECT_EQ(yp.state, SplitState::Axis(0, hidden));
  EXPECT_EQ(ShapeOf(yp.shadows[0]), (std::vector<int64_t>{4, 3, 1, 1}));
  EXPECT_EQ(ShapeOf(yp.shadows[1]), (std::vector<int64_t>{8, 3, 1, 1}));
  EXPECT_EQ(yp.shadows[1]->src[0], parts_.placements.Of(w1).shadows[1]);
  Tensor* z = *MulMat(ctx_, w2, y);
  EXPECT_TRUE(Derive(z).state.is_partial());
  EXPECT_EQ(parts_.plan.comm_count, 0);
  const Placement& out = Derive(Add(ctx_, x, z));
  EXPECT_TRUE(out.state.is_mirrored());
  EXPECT_EQ(parts_.plan.comm_count, 1);
}

// q [8, T] cut in whole heads of 4 stays cut as [4, heads, T]; a shape that breaks the heads
// gathers q first.
TEST_F(StateDeriverTest, AReshapeKeepsWholeHeadsOrGathers) {
  Tensor* q = Leaf({8, 3}, SplitState::Axis(0, Ranges{{0, 4}, {4, 8}}));
  const Placement& heads = Derive(Reshape(ctx_, q, {4, 2, 3}));
  EXPECT_EQ(heads.state, SplitState::Axis(1, Ranges{{0, 1}, {1, 2}}));
  EXPECT_EQ(ShapeOf(heads.shadows[1]), (std::vector<int64_t>{4, 1, 3, 1}));
  EXPECT_EQ(parts_.plan.comm_count, 0);
  const Placement& odd = Derive(Reshape(ctx_, q, {6, 4}));
  EXPECT_TRUE(odd.state.is_mirrored());
  EXPECT_EQ(ShapeOf(odd.shadows[0]), (std::vector<int64_t>{6, 4, 1, 1}));
  EXPECT_EQ(parts_.plan.comm_count, 1);
}

// The KV cache [16, ctx] cut by KV head (8 rows each), viewed as [8, ctx, 2]: cut along
// dim 2, each device's view taken of its own slice, no collective.
TEST_F(StateDeriverTest, AViewOfAHeadCutCacheKeepsTheCut) {
  Tensor* cache = Leaf({16, 6}, SplitState::Axis(0, Ranges{{0, 8}, {8, 16}}));
  const Placement& v = Derive(View(ctx_, cache, {8, 6, 2}, {cache->nb[1], 8 * sizeof(float)}, 0));
  EXPECT_EQ(v.state, SplitState::Axis(2, Ranges{{0, 1}, {1, 2}}));
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(v.shadows[d]->view_src, parts_.placements.Of(cache).shadows[d]);
    EXPECT_EQ(ShapeOf(v.shadows[d]), (std::vector<int64_t>{8, 6, 1, 1}));
  }
  EXPECT_TRUE(parts_.placements.Of(cache).aliased);  // never all-reduced in place now.
  EXPECT_EQ(parts_.plan.comm_count, 0);
}

// gpt-oss's unfused attention, 4 query heads over 2 KV heads cut one KV head per device:
// K^T q keeps the cut (scaled to query heads), SOFT_MAX takes each device's sinks with its
// heads, V kq keeps it too: no collective.
TEST_F(StateDeriverTest, GroupedHeadsAndSinksKeepTheHeadCut) {
  const SplitState kv_cut = SplitState::Axis(2, Ranges{{0, 1}, {1, 2}});
  const SplitState q_cut = SplitState::Axis(2, Ranges{{0, 2}, {2, 4}});
  Tensor* k = Leaf({8, 5, 2}, kv_cut);  // [head_dim, n_kv, n_head_kv]
  Tensor* q = Leaf({8, 3, 4}, q_cut);   // [head_dim, n_tokens, n_head]
  Tensor* vt = Leaf({5, 8, 2}, kv_cut);
  Tensor* sinks = Leaf({4}, SplitState::Mirrored());
  Tensor* mask = Leaf({5, 3}, SplitState::Mirrored());
  Tensor* kq = *MulMat(ctx_, k, q);
  const Placement& kqp = Derive(kq);
  EXPECT_EQ(kqp.state, q_cut);
  EXPECT_EQ(ShapeOf(kqp.shadows[1]), (std::vector<int64_t>{5, 3, 2, 1}));
  Tensor* probs = *SoftMax(ctx_, kq, mask, 0.5f, sinks);
  const Placement& pp = Derive(probs);
  EXPECT_EQ(pp.state, q_cut);
  EXPECT_EQ(ShapeOf(pp.shadows[1]->src[2]), (std::vector<int64_t>{2, 1, 1, 1}));
  const Placement& out = Derive(MulMat(ctx_, vt, probs));
  EXPECT_EQ(out.state, q_cut);
  EXPECT_EQ(parts_.plan.comm_count, 0);
}

TEST_F(StateDeriverTest, ATransposeMovesTheCut) {
  Tensor* a = Leaf({4, 6}, SplitState::Axis(1, Ranges{{0, 2}, {2, 6}}));
  const Placement& t = Derive(Transpose(ctx_, a));
  EXPECT_EQ(t.state, SplitState::Axis(0, Ranges{{0, 2}, {2, 6}}));
  EXPECT_EQ(ShapeOf(t.shadows[1]), (std::vector<int64_t>{4, 4, 1, 1}));
}

TEST_F(StateDeriverTest, AWriteIntoAGatheredCopyIsRefused) {
  Tensor* src = Leaf({4, 3}, SplitState::Mirrored());
  Tensor* dst = Leaf({4, 3}, SplitState::Mirrored());
  parts_.placements.Of(dst).detached = true;
  Tensor* cpy = *Cpy(ctx_, src, dst);
  Placement& p = parts_.placements.Add(cpy);
  absl::Status s = parts_.deriver.Derive(cpy, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace tg::meta
