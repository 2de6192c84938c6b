// Split states and how they pass through ops: ranges, validation, host slicing, reshape/view
// mapping and the per-op rules (meta/split_state.h, slice_copy.h, view_split.h,
// split_rules.h).
#include "meta/split_state.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "core/context.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "meta/slice_copy.h"
#include "meta/split_rules.h"
#include "meta/view_split.h"

namespace tg::meta {
namespace {

using Ranges = std::vector<AxisRange>;

Ranges R(std::initializer_list<std::pair<int64_t, int64_t>> r) {
  Ranges out;
  for (auto [b, e] : r) out.push_back({b, e});
  return out;
}

TEST(ProportionalRangesTest, EvenUnevenAndUnits) {
  EXPECT_EQ(ProportionalRanges(8, 1, {0.5f, 0.5f}), R({{0, 4}, {4, 8}}));
  EXPECT_EQ(ProportionalRanges(8, 1, {0.75f, 0.25f}), R({{0, 6}, {6, 8}}));
  // Units of 32 (a quant block): 96 = 3 blocks over 2 devices.
  EXPECT_EQ(ProportionalRanges(96, 32, {0.5f, 0.5f}), R({{0, 64}, {64, 96}}));
  // A last unit shorter than the others.
  EXPECT_EQ(ProportionalRanges(100, 32, {0.5f, 0.5f}), R({{0, 64}, {64, 100}}));
  // 4 KV heads over 3:1:1:1 leave the third device empty.
  EXPECT_EQ(ProportionalRanges(4, 1, {0.5f, 1 / 6.0f, 1 / 6.0f, 1 / 6.0f}),
            R({{0, 2}, {2, 3}, {3, 3}, {3, 4}}));
  // More devices than units.
  const Ranges three = ProportionalRanges(3, 1, {0.25f, 0.25f, 0.25f, 0.25f});
  int64_t covered = 0;
  for (const AxisRange& r : three) covered += r.size();
  EXPECT_EQ(covered, 3);
  // A zero share gets nothing.
  EXPECT_EQ(ProportionalRanges(6, 1, {0.0f, 0.5f, 0.5f}), R({{0, 0}, {0, 3}, {3, 6}}));
}

TEST(SplitStateTest, CountsEqualityAndText) {
  const SplitState s = SplitState::Axis(1, R({{0, 3}, {3, 3}, {3, 8}}));
  EXPECT_TRUE(s.is_axis());
  EXPECT_EQ(s.Count(0), 3);
  EXPECT_TRUE(s.Empty(1));
  EXPECT_EQ(s.Count(2), 5);
  EXPECT_EQ(s.ToString(), "AXIS_1[0:3|3:3|3:8]");
  EXPECT_EQ(s, SplitState::Axis(1, R({{0, 3}, {3, 3}, {3, 8}})));
  EXPECT_NE(s, SplitState::Axis(0, R({{0, 3}, {3, 3}, {3, 8}})));
  EXPECT_NE(s, SplitState::Mirrored());
  EXPECT_EQ(SplitState::Partial().ToString(), "PARTIAL");
  EXPECT_EQ(s.Remapped(2, 4, 1).ToString(), "AXIS_2[0:12|12:12|12:32]");
  const SplitState seg = SplitState::Segmented(1, {{{0, 2}, {4, 6}}, {{2, 4}, {6, 8}}});
  EXPECT_TRUE(seg.segmented());
  EXPECT_EQ(seg.Count(1), 4);
  EXPECT_EQ(seg.ToString(), "AXIS_1[0:2+4:6|2:4+6:8]");
}

TEST(SplitStateTest, ValidateNamesTheProblem) {
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kQ8_0, {64, 8});
  t->SetName("w");
  EXPECT_TRUE(SplitState::Axis(1, R({{0, 5}, {5, 8}})).Validate(*t, 2).ok());
  EXPECT_TRUE(SplitState::Axis(0, R({{0, 32}, {32, 64}})).Validate(*t, 2).ok());
  const absl::Status gap = SplitState::Axis(1, R({{0, 4}, {5, 8}})).Validate(*t, 2);
  EXPECT_NE(gap.message().find("do not tile"), std::string::npos) << gap;
  const absl::Status count = SplitState::Axis(1, R({{0, 8}})).Validate(*t, 2);
  EXPECT_NE(count.message().find("1 entries for 2 devices"), std::string::npos) << count;
  const absl::Status block = SplitState::Axis(0, R({{0, 16}, {16, 64}})).Validate(*t, 2);
  EXPECT_NE(block.message().find("multiples of 32"), std::string::npos) << block;
  const absl::Status short_cover = SplitState::Axis(1, R({{0, 4}, {4, 7}})).Validate(*t, 2);
  EXPECT_FALSE(short_cover.ok());
}

// Extract then insert gives back the whole tensor, for every axis, and for segments.
TEST(SliceCopyTest, RoundTripsEveryAxis) {
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {4, 3, 5, 2});
  std::vector<float> full(t->NumElements());
  std::iota(full.begin(), full.end(), 0.0f);
  const auto* bytes = reinterpret_cast<const uint8_t*>(full.data());
  for (int axis = 0; axis < 4; ++axis) {
    const SplitState s =
        SplitState::Axis(axis, ProportionalRanges(t->ne[axis], 1, {0.5f, 0.25f, 0.25f}));
    std::vector<float> back(full.size(), -1.0f);
    for (int d = 0; d < 3; ++d) {
      std::vector<uint8_t> slice(SliceBytes(*t, s, d));
      ExtractSlice(*t, s, d, bytes, slice.data());
      InsertSlice(*t, s, d, slice.data(), reinterpret_cast<uint8_t*>(back.data()));
    }
    EXPECT_EQ(back, full) << "axis " << axis;
  }
  // Device 0 gets rows {0, 2} of dim 1, device 1 row 1 (a fused tensor's segments).
  const SplitState seg = SplitState::Segmented(1, {{{0, 1}, {2, 3}}, {{1, 2}}});
  std::vector<uint8_t> slice(SliceBytes(*t, seg, 0));
  ExtractSlice(*t, seg, 0, bytes, slice.data());
  const auto* f = reinterpret_cast<const float*>(slice.data());
  EXPECT_EQ(f[0], 0.0f);   // row 0
  EXPECT_EQ(f[4], 8.0f);   // row 2
  EXPECT_EQ(f[8], 12.0f);  // next dim-2 index, row 0
}

TEST(SliceCopyTest, QuantizedRowsCutAtBlocks) {
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kQ8_0, {64, 2});
  std::vector<uint8_t> full(t->NumBytes());
  std::iota(full.begin(), full.end(), 0);
  const SplitState s = SplitState::Axis(0, R({{0, 32}, {32, 64}}));
  ASSERT_EQ(SliceBytes(*t, s, 1), 2 * BlockBytes(DType::kQ8_0));
  std::vector<uint8_t> slice(SliceBytes(*t, s, 1));
  ExtractSlice(*t, s, 1, full.data(), slice.data());
  EXPECT_EQ(slice[0], full[BlockBytes(DType::kQ8_0)]);
}

TEST(ViewSplitTest, ReshapeKeepsWholeHeads) {
  const int64_t q[4] = {48, 7, 1, 1};  // [n_embd_q = 6 heads * 8, T]
  const int64_t heads[4] = {8, 6, 7, 1};
  const SplitState by_cols = SplitState::Axis(0, R({{0, 24}, {24, 48}}));
  std::optional<SplitState> h = MapReshapeSplit(q, by_cols, heads);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->ToString(), "AXIS_1[0:3|3:6]");
  // And back: [hd, H, T] cut along H -> [hd*H, T] cut along dim 0.
  std::optional<SplitState> back = MapReshapeSplit(heads, *h, q);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, by_cols);
  // A cut inside a head cannot become a cut along the head dimension.
  EXPECT_FALSE(MapReshapeSplit(q, SplitState::Axis(0, R({{0, 20}, {20, 48}})), heads));
}

TEST(ViewSplitTest, KvCacheViewIsCutByKvHead) {
  // Cache [n_embd_kv = 4 heads * 8, n_ctx = 16], cut 3:1 by KV head; attention reads
  // [hd, n_kv = 5, H_kv] with strides (cache row, head).
  Context ctx;
  Tensor* cache = *ctx.NewTensor(DType::kF32, {32, 16});
  const SplitState cut = SplitState::Axis(0, R({{0, 24}, {24, 32}}));
  Tensor* view = *View(ctx, cache, {8, 5, 4}, {cache->nb[1], 8 * sizeof(float)}, 0);
  std::optional<ViewSplit> m = MapViewSplit(*cache, cut, *view);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->state.ToString(), "AXIS_2[0:3|3:4]");
  EXPECT_EQ(m->slices[1].ne[2], 1);
  EXPECT_EQ(m->slices[1].nb[1], 8 * sizeof(float));  // device 1's rows hold one head.
  EXPECT_EQ(m->slices[1].offset, 0u);
  EXPECT_EQ(m->slices[0].nb[1], 24 * sizeof(float));
  // Heads read half a head off: one of them straddles the two devices.
  Tensor* odd = *View(ctx, cache, {8, 5, 3}, {cache->nb[1], 8 * sizeof(float)}, 4 * sizeof(float));
  EXPECT_FALSE(MapViewSplit(*cache, cut, *odd).has_value());
  // A plain range of a row that crosses the boundary still maps (each side is one device's).
  Tensor* span = *View(ctx, cache, {12, 2}, {cache->nb[1]}, 20 * sizeof(float));
  std::optional<ViewSplit> s = MapViewSplit(*cache, cut, *span);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->state.ToString(), "AXIS_0[0:4|4:12]");
}

// The rules on small nodes: what a result becomes and what each source must be first.
class RulesTest : public ::testing::Test {
 protected:
  Tensor* New(DType type, std::initializer_list<int64_t> ne) { return *ctx_.NewTensor(type, ne); }
  OpSplit Derive(Tensor* node, std::initializer_list<SplitState> states) {
    std::vector<const SplitState*> ptrs;
    for (const SplitState& s : states) ptrs.push_back(&s);
    absl::StatusOr<OpSplit> o = DeriveOpSplit(*node, ptrs);
    EXPECT_TRUE(o.ok()) << o.status();
    return o.ok() ? *o : OpSplit{};
  }
  Context ctx_;
  const SplitState m_ = SplitState::Mirrored();
  const SplitState rows_ = SplitState::Axis(1, R({{0, 40}, {40, 64}}));
  const SplitState cols_ = SplitState::Axis(0, R({{0, 32}, {32, 64}}));
};

TEST_F(RulesTest, MatMulByRowsByColumnsAndWhole) {
  Tensor* w = New(DType::kF32, {64, 64});
  Tensor* x = New(DType::kF32, {64, 3});
  Tensor* y = *MulMat(ctx_, w, x);
  OpSplit o = Derive(y, {rows_, m_});
  EXPECT_EQ(o.result.ToString(), "AXIS_0[0:40|40:64]");
  EXPECT_FALSE(o.src[0].has_value());
  EXPECT_TRUE(o.src[1].has_value() && o.src[1]->is_mirrored());
  o = Derive(y, {cols_, cols_});
  EXPECT_TRUE(o.result.is_partial());
  o = Derive(y, {cols_, m_});  // x is sliced to the weight's columns.
  EXPECT_TRUE(o.result.is_partial());
  EXPECT_EQ(*o.src[1], cols_);
  // A Q8_0 weight cannot be cut at 16 to follow its input: the input is gathered.
  Tensor* wq = New(DType::kQ8_0, {64, 64});
  Tensor* yq = *MulMat(ctx_, wq, x);
  const SplitState odd = SplitState::Axis(0, R({{0, 16}, {16, 64}}));
  o = Derive(yq, {m_, odd});
  EXPECT_TRUE(o.result.is_mirrored());
  EXPECT_TRUE(o.src[1]->is_mirrored());
}

// MUL_MAT_ID: experts cut by rows -> row cut; along K -> partial (b cut alike); by whole
// experts -> partial routed by the ids, which SWIGLU and MUL keep only for the same ids.
TEST_F(RulesTest, MatMulIdByRowsByColumnsAndByExperts) {
  Tensor* w = New(DType::kF32, {64, 64, 4});
  Tensor* x = New(DType::kF32, {64, 1, 3});
  Tensor* ids = New(DType::kI32, {2, 3});
  Tensor* y = *MulMatId(ctx_, w, x, ids);
  OpSplit o = Derive(y, {rows_, m_, m_});
  EXPECT_EQ(o.result.ToString(), "AXIS_0[0:40|40:64]");
  EXPECT_TRUE(o.src[1]->is_mirrored() && o.src[2]->is_mirrored());
  o = Derive(y, {cols_, m_, m_});
  EXPECT_TRUE(o.result.is_partial());
  EXPECT_FALSE(o.result.by_experts());
  EXPECT_EQ(*o.src[1], cols_);
  const SplitState experts = SplitState::Axis(2, R({{0, 3}, {3, 4}}));
  o = Derive(y, {experts, m_, m_});
  EXPECT_EQ(o.result.ToString(), "PARTIAL_BY_EXPERTS[0:3|3:4]");
  EXPECT_EQ(o.result.routed_by(), ids);
  EXPECT_FALSE(o.src[1].has_value());
  const SplitState routed = o.result;
  Tensor* z = *Swiglu(ctx_, y, *MulMatId(ctx_, w, x, ids));
  o = Derive(z, {routed, routed});
  EXPECT_EQ(o.result, routed);
  EXPECT_FALSE(o.src[0].has_value() || o.src[1].has_value());
  // The down projection takes the routed activations as they are.
  Tensor* down = *MulMatId(ctx_, w, z, ids);
  o = Derive(down, {experts, routed, m_});
  EXPECT_TRUE(o.result.by_experts());
  EXPECT_FALSE(o.src[1].has_value());
  // Rows routed by other ids are not where this device's experts need them: reduced first.
  Tensor* other_ids = New(DType::kI32, {2, 3});
  const SplitState elsewhere = SplitState::ExpertPartial(R({{0, 3}, {3, 4}}), other_ids);
  o = Derive(z, {routed, elsewhere});
  EXPECT_TRUE(o.result.is_mirrored());
  EXPECT_TRUE(o.src[0]->is_mirrored() && o.src[1]->is_mirrored());
  o = Derive(down, {experts, elsewhere, m_});
  EXPECT_TRUE(o.src[1]->is_mirrored());
}

TEST_F(RulesTest, PartialSumsStayPartialOnlyThroughLinearOps) {
  Tensor* a = New(DType::kF32, {64, 3});
  Tensor* b = New(DType::kF32, {64, 3});
  const SplitState p = SplitState::Partial();
  EXPECT_TRUE(Derive(*Add(ctx_, a, b), {p, p}).result.is_partial());
  OpSplit o = Derive(*Add(ctx_, a, b), {m_, p});  // residual + partial: all-reduce first.
  EXPECT_TRUE(o.result.is_mirrored());
  EXPECT_TRUE(o.src[1]->is_mirrored());
  EXPECT_TRUE(Derive(*Mul(ctx_, a, b), {p, m_}).result.is_partial());
  EXPECT_TRUE(Derive(*Scale(ctx_, a, 2.0f), {p}).result.is_partial());
  o = Derive(*Scale(ctx_, a, 2.0f, 1.0f), {p});
  EXPECT_TRUE(o.src[0]->is_mirrored());
  o = Derive(*Silu(ctx_, a), {p});
  EXPECT_TRUE(o.src[0]->is_mirrored());
}

TEST_F(RulesTest, RowOpsGatherACutRow) {
  Tensor* a = New(DType::kF32, {64, 3});
  OpSplit o = Derive(*RmsNorm(ctx_, a, 1e-5f), {cols_});
  EXPECT_TRUE(o.result.is_mirrored());
  EXPECT_TRUE(o.src[0]->is_mirrored());
  const SplitState by_row = SplitState::Axis(1, R({{0, 2}, {2, 3}}));
  o = Derive(*RmsNorm(ctx_, a, 1e-5f), {by_row});
  EXPECT_EQ(o.result, by_row);
  Tensor* mask = New(DType::kF32, {64, 4});
  o = Derive(*SoftMax(ctx_, a, mask, 1.0f), {by_row, m_});
  EXPECT_EQ(o.result, by_row);
  EXPECT_EQ(*o.src[1], by_row);  // the mask's rows follow.
}

TEST_F(RulesTest, AttentionKeepsHeadsTogether) {
  // 4 query heads over 2 KV heads (2 per group), head_dim 8, 3 positions of 5 cached.
  Tensor* q = New(DType::kF32, {8, 3, 4});
  Tensor* k = New(DType::kF32, {8, 5, 2});
  Tensor* v = New(DType::kF32, {8, 5, 2});
  Tensor* fa = *FlashAttn(ctx_, q, k, v, nullptr, 0.3f);
  const SplitState kv = SplitState::Axis(2, R({{0, 1}, {1, 2}}));
  OpSplit o = Derive(fa, {m_, kv, kv});
  EXPECT_EQ(o.src[0]->ToString(), "AXIS_2[0:2|2:4]");  // q follows its KV heads.
  EXPECT_EQ(o.result.ToString(), "AXIS_1[0:2|2:4]");
  Tensor* pos = New(DType::kI32, {3});
  Tensor* qh = New(DType::kF32, {8, 4, 3});
  RopeParams rp;
  rp.n_dims = 8;
  const SplitState heads = SplitState::Axis(1, R({{0, 2}, {2, 4}}));
  o = Derive(*Rope(ctx_, qh, pos, nullptr, rp), {heads, m_});
  EXPECT_EQ(o.result, heads);
  EXPECT_TRUE(o.src[1]->is_mirrored());
}

TEST_F(RulesTest, WritesFollowTheDestination) {
  Tensor* cache = New(DType::kF32, {16, 10});
  Tensor* rows = New(DType::kF32, {16, 2});
  Tensor* idx = New(DType::kI32, {2});
  const SplitState cut = SplitState::Axis(0, R({{0, 8}, {8, 16}}));
  OpSplit o = Derive(*SetRows(ctx_, cache, rows, idx), {cut, m_, m_});
  EXPECT_EQ(o.result, cut);
  EXPECT_FALSE(o.src[0].has_value());
  EXPECT_EQ(*o.src[1], cut);
  std::vector<const SplitState*> bad = {&rows_, &m_, &m_};
  Tensor* c2 = New(DType::kF32, {16, 64});
  absl::StatusOr<OpSplit> err = DeriveOpSplit(**SetRows(ctx_, c2, rows, idx), bad);
  EXPECT_EQ(err.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tg::meta
