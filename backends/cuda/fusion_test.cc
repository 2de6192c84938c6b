// PlanFusions on a llama-like decode layer (core/ops.h) with fake addresses: the three
// fusions are found where they are safe and refused where an intermediate result is read
// elsewhere, is an output, or where moving a ROPE later would read memory a node in between
// overwrote.
#include "backends/cuda/fusion.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backends/cuda/graph_testing.h"
#include "core/context.h"
#include "core/ops.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

int IndexOf(const Graph& g, const Tensor* t) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i] == t) return static_cast<int>(i);
  }
  return -1;
}

// Every skipped node is computed by exactly one fused step, and every fused step's nodes
// are skipped except the one it runs at.
void ExpectConsistent(const Graph& g, const FusionPlan& plan) {
  ASSERT_EQ(plan.steps.size(), g.nodes.size());
  absl::flat_hash_map<const Tensor*, int> covered;
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusedStep& s = plan.steps[i];
    if (s.kind == FusionKind::kNone || s.kind == FusionKind::kSkip) continue;
    ++fused;
    bool runs_here = false;
    for (const Tensor* t : s.nodes) {
      if (t == nullptr) continue;
      ++covered[t];
      if (t == g.nodes[i]) runs_here = true;
    }
    EXPECT_TRUE(runs_here) << i;
  }
  EXPECT_EQ(fused, plan.n_fused);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const bool skipped = plan.steps[i].kind == FusionKind::kSkip;
    const int times = covered.contains(g.nodes[i]) ? covered[g.nodes[i]] : 0;
    EXPECT_EQ(times, skipped || (plan.steps[i].kind != FusionKind::kNone) ? 1 : 0) << i;
  }
}

class FusionTest : public ::testing::Test {
 protected:
  void Build(DType weight_type, int64_t n_tokens) {
    l_ = testing::BuildDecodeLayer(ctx_, weight_type, 256, 512, n_tokens, 64);
  }
  void Place(std::vector<Tensor*> outputs = {}) {
    if (outputs.empty()) outputs = {l_.out};
    g_ = *BuildGraph(outputs);
    testing::FakePlace(g_, &arena_);
  }
  FusionKind KindAt(const Tensor* t, const FusionPlan& p) { return p.steps[IndexOf(g_, t)].kind; }

  Context ctx_;
  testing::DecodeLayer l_;
  Graph g_;
  std::vector<char> arena_;
  FusionOptions options_;
};

TEST_F(FusionTest, FindsAllThreeInADecodeLayer) {
  Build(DType::kQ4_0, 1);
  Place();
  const FusionPlan p = PlanFusions(g_, options_);
  ExpectConsistent(g_, p);
  EXPECT_EQ(p.n_fused, 3);
  EXPECT_EQ(KindAt(l_.norm, p), FusionKind::kSkip);
  const FusedStep& nm = p.steps[IndexOf(g_, l_.normed)];
  EXPECT_EQ(nm.kind, FusionKind::kRmsNormMul);
  EXPECT_EQ(nm.nodes[0], l_.norm);
  EXPECT_EQ(nm.nodes[1], l_.normed);
  // The pair runs at whichever ROPE comes later.
  const int iq = IndexOf(g_, l_.q_rope), ik = IndexOf(g_, l_.k_rope);
  const Tensor* later = iq > ik ? l_.q_rope : l_.k_rope;
  EXPECT_EQ(p.steps[IndexOf(g_, later)].kind, FusionKind::kRopePair);
  EXPECT_EQ(p.steps[std::min(iq, ik)].kind, FusionKind::kSkip);
  const FusedStep& sw = p.steps[IndexOf(g_, l_.swiglu)];
  EXPECT_EQ(sw.kind, FusionKind::kGateUpSwiglu);
  EXPECT_EQ(sw.nodes[0], l_.gate);
  EXPECT_EQ(sw.nodes[1], l_.up);
  EXPECT_EQ(KindAt(l_.gate, p), FusionKind::kSkip);
  EXPECT_EQ(KindAt(l_.up, p), FusionKind::kSkip);
}

TEST_F(FusionTest, DisabledFusesNothing) {
  Build(DType::kQ4_0, 1);
  Place();
  options_.enabled = false;
  const FusionPlan p = PlanFusions(g_, options_);
  EXPECT_EQ(p.n_fused, 0);
  for (const FusedStep& s : p.steps) EXPECT_EQ(s.kind, FusionKind::kNone);
}

TEST_F(FusionTest, PromptBatchesAndFloatWeightsKeepSeparateProducts) {
  for (DType type : {DType::kQ8_0, DType::kF16}) {
    Context ctx;
    for (int64_t tokens : {1, 8, 9, 64}) {
      testing::DecodeLayer l = testing::BuildDecodeLayer(ctx, type, 256, 512, tokens, 64);
      Graph g = *BuildGraph({l.out});
      std::vector<char> arena;
      testing::FakePlace(g, &arena);
      const FusionPlan p = PlanFusions(g, options_);
      ExpectConsistent(g, p);
      const bool gate_up = type == DType::kQ8_0 && tokens <= options_.max_gate_up_tokens;
      EXPECT_EQ(p.steps[IndexOf(g, l.swiglu)].kind,
                gate_up ? FusionKind::kGateUpSwiglu : FusionKind::kNone)
          << DTypeName(type) << " " << tokens;
      // The norm and the ropes do not depend on the batch or the weights.
      EXPECT_EQ(p.steps[IndexOf(g, l.normed)].kind, FusionKind::kRmsNormMul);
      EXPECT_EQ(p.n_fused, gate_up ? 3 : 2);
    }
  }
}

TEST_F(FusionTest, NormReadElsewhereStaysSeparate) {
  Build(DType::kQ4_0, 1);
  // A second reader of the norm, through a view.
  Tensor* extra = *Scale(ctx_, *Reshape(ctx_, l_.norm, {256}), 2.0f);
  Place({l_.out, extra});
  const FusionPlan p = PlanFusions(g_, options_);
  ExpectConsistent(g_, p);
  EXPECT_EQ(KindAt(l_.normed, p), FusionKind::kNone);
  EXPECT_EQ(KindAt(l_.norm, p), FusionKind::kNone);
}

TEST_F(FusionTest, OutputIntermediatesStaySeparate) {
  Build(DType::kQ4_0, 1);
  Place({l_.out, l_.norm, l_.gate});  // both read back by the caller.
  const FusionPlan p = PlanFusions(g_, options_);
  ExpectConsistent(g_, p);
  EXPECT_EQ(KindAt(l_.normed, p), FusionKind::kNone);
  EXPECT_EQ(KindAt(l_.swiglu, p), FusionKind::kNone);
  EXPECT_EQ(p.n_fused, 1);  // the ropes.
}

TEST_F(FusionTest, RopeIsNotMovedPastAWriterOfItsSource) {
  Build(DType::kQ4_0, 1);
  Place();
  const int iq = IndexOf(g_, l_.q_rope), ik = IndexOf(g_, l_.k_rope);
  const Tensor* first = iq < ik ? l_.q_rope : l_.k_rope;
  // The allocator gave the first ROPE's source memory to a product in between.
  Tensor* between = nullptr;
  for (int i = std::min(iq, ik) + 1; i < std::max(iq, ik); ++i) {
    if (g_.nodes[i]->op == Op::kMulMat) between = g_.nodes[i];
  }
  ASSERT_NE(between, nullptr);
  between->data = first->src[0]->data;
  const FusionPlan p = PlanFusions(g_, options_);
  ExpectConsistent(g_, p);
  EXPECT_EQ(KindAt(l_.q_rope, p), FusionKind::kNone);
  EXPECT_EQ(KindAt(l_.k_rope, p), FusionKind::kNone);
}

TEST_F(FusionTest, RopeIsNotMovedPastAReaderOfItsResult) {
  Context ctx;
  Tensor* pos = *ctx.NewTensor(DType::kI32, {1});
  Tensor* a = *ctx.NewTensor(DType::kF32, {64, 4, 1});
  Tensor* b = *ctx.NewTensor(DType::kF32, {64, 4, 1});
  RopeParams rp;
  rp.n_dims = 64;
  Tensor* ra = *Rope(ctx, a, pos, nullptr, rp);
  Tensor* reader = *Scale(ctx, ra, 3.0f);  // reads ra before the second rope.
  Tensor* rb = *Rope(ctx, *Add(ctx, b, reader), pos, nullptr, rp);
  Graph g = *BuildGraph({rb});
  std::vector<char> arena;
  testing::FakePlace(g, &arena);
  const FusionPlan p = PlanFusions(g, options_);
  EXPECT_EQ(p.n_fused, 0);
  // Without the reader in between, the same two ropes pair up.
  Context ctx2;
  Tensor* pos2 = *ctx2.NewTensor(DType::kI32, {1});
  Tensor* a2 = *ctx2.NewTensor(DType::kF32, {64, 4, 1});
  Tensor* b2 = *ctx2.NewTensor(DType::kF32, {64, 4, 1});
  Tensor* ra2 = *Rope(ctx2, a2, pos2, nullptr, rp);
  Tensor* rb2 = *Rope(ctx2, *Scale(ctx2, b2, 3.0f), pos2, nullptr, rp);
  Graph g2 = *BuildGraph({*Add(ctx2, ra2, rb2)});
  std::vector<char> arena2;
  testing::FakePlace(g2, &arena2);
  EXPECT_EQ(PlanFusions(g2, options_).n_fused, 1);
}

TEST_F(FusionTest, RopesWithDifferentParametersOrPositionsStaySeparate) {
  for (int variant = 0; variant < 2; ++variant) {
    Context ctx;
    Tensor* pos = *ctx.NewTensor(DType::kI32, {1});
    Tensor* pos_b = *ctx.NewTensor(DType::kI32, {1});
    Tensor* a = *ctx.NewTensor(DType::kF32, {64, 4, 1});
    Tensor* b = *ctx.NewTensor(DType::kF32, {64, 4, 1});
    RopeParams rp;
    rp.n_dims = 64;
    RopeParams rp_b = rp;
    if (variant == 0) rp_b.freq_base = 500000.0f;
    Tensor* ra = *Rope(ctx, a, pos, nullptr, rp);
    Tensor* rb = *Rope(ctx, b, variant == 1 ? pos_b : pos, nullptr, rp_b);
    Graph g = *BuildGraph({*Add(ctx, ra, rb)});
    std::vector<char> arena;
    testing::FakePlace(g, &arena);
    EXPECT_EQ(PlanFusions(g, options_).n_fused, 0) << variant;
  }
}

TEST_F(FusionTest, GateAndUpOfDifferentActivationsStaySeparate) {
  Context ctx;
  Tensor* wg = *ctx.NewTensor(DType::kQ4_0, {256, 512});
  Tensor* wu = *ctx.NewTensor(DType::kQ4_0, {256, 512});
  Tensor* x = *ctx.NewTensor(DType::kF32, {256, 1});
  Tensor* y = *ctx.NewTensor(DType::kF32, {256, 1});
  Tensor* sw = *Swiglu(ctx, *MulMat(ctx, wg, x), *MulMat(ctx, wu, y));
  Graph g = *BuildGraph({sw});
  std::vector<char> arena;
  testing::FakePlace(g, &arena);
  EXPECT_EQ(PlanFusions(g, options_).n_fused, 0);
  // Same activation, different weight types: also separate.
  Tensor* wk = *ctx.NewTensor(DType::kQ8_0, {256, 512});
  Tensor* sw2 = *Swiglu(ctx, *MulMat(ctx, wg, x), *MulMat(ctx, wk, x));
  Graph g2 = *BuildGraph({sw2});
  testing::FakePlace(g2, &arena);
  EXPECT_EQ(PlanFusions(g2, options_).n_fused, 0);
  // And the matching pair fuses, in either order.
  Tensor* up = *MulMat(ctx, wu, x);
  Tensor* gate = *MulMat(ctx, wg, x);
  Tensor* sw3 = *Swiglu(ctx, gate, up);
  Graph g3 = *BuildGraph({sw3});
  testing::FakePlace(g3, &arena);
  const FusionPlan p3 = PlanFusions(g3, options_);
  ASSERT_EQ(p3.n_fused, 1);
  EXPECT_EQ(p3.steps[IndexOf(g3, sw3)].nodes[0], gate);
}

TEST_F(FusionTest, NormWhoseResultOverlapsItsInputStaysSeparate) {
  Build(DType::kQ4_0, 1);
  Place();
  l_.normed->data = static_cast<char*>(l_.x->data) + 256;  // partly over x.
  const FusionPlan p = PlanFusions(g_, options_);
  EXPECT_EQ(KindAt(l_.normed, p), FusionKind::kNone);
}

}  // namespace
}  // namespace tg::cuda
