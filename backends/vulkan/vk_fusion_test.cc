// PlanFusion on llama-layer-shaped graphs: what it fuses, and what it must leave alone.
#include "backends/vulkan/vk_fusion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "core/context.h"
#include "core/ops.h"

namespace tg::vulkan {
namespace {

// Every tensor apart: a fresh range per base tensor.
AddressRange Apart(const Tensor* t) {
  while (t->view_src != nullptr) t = t->view_src;
  const uint64_t a = reinterpret_cast<uintptr_t>(t) << 8;
  return {a, a + 1};
}

constexpr int64_t kAnyColumns = std::numeric_limits<int64_t>::max();

std::vector<FusionKind> Kinds(const std::vector<FusedGroup>& groups) {
  std::vector<FusionKind> out;
  for (const FusedGroup& g : groups) out.push_back(g.kind);
  return out;
}

struct Layer {
  Context ctx;
  Tensor *x, *norm, *normed, *q, *k, *v, *gate, *up, *act;
  Graph graph;
};

// norm(x) * w, then q/k/v of it, then swiglu(gate(v), up(v)); `extra_norm_reader` also feeds
// the raw norm into an ADD.
void BuildLayer(Layer* l, bool extra_norm_reader) {
  Context& c = l->ctx;
  l->x = *c.NewTensor(DType::kF32, {64, 3});
  Tensor* w = *c.NewTensor(DType::kF32, {64});
  Tensor* wq = *c.NewTensor(DType::kQ8_0, {64, 64});
  Tensor* wk = *c.NewTensor(DType::kQ8_0, {64, 32});
  Tensor* wv = *c.NewTensor(DType::kQ8_0, {64, 64});
  Tensor* wg = *c.NewTensor(DType::kQ8_0, {64, 96});
  Tensor* wu = *c.NewTensor(DType::kQ8_0, {64, 96});
  l->norm = *RmsNorm(c, l->x, 1e-5f);
  l->normed = *Mul(c, l->norm, w);
  l->q = *MulMat(c, wq, l->normed);
  l->k = *MulMat(c, wk, l->normed);
  l->v = *MulMat(c, wv, l->normed);
  l->gate = *MulMat(c, wg, l->v);
  l->up = *MulMat(c, wu, l->v);
  l->act = *Swiglu(c, l->gate, l->up);
  std::vector<Tensor*> outs = {l->q, l->k, l->act};
  if (extra_norm_reader) outs.push_back(*Add(c, l->norm, l->x));
  for (Tensor* o : outs) o->flags |= kFlagOutput;
  l->graph = *BuildGraph(outs);
}

TEST(FusionTest, FusesNormMulQkvAndGateUpSwiglu) {
  Layer l;
  BuildLayer(&l, false);
  const std::vector<FusedGroup> groups = PlanFusion(l.graph.nodes, Apart, kAnyColumns);
  EXPECT_EQ(Kinds(groups),
            (std::vector<FusionKind>{FusionKind::kRmsNormMul, FusionKind::kMulMatMulti,
                                     FusionKind::kGateUpSwiglu}));
  EXPECT_EQ(groups[1].nodes, (std::vector<const Tensor*>{l.q, l.k, l.v}));
  EXPECT_EQ(groups[2].nodes, (std::vector<const Tensor*>{l.gate, l.up, l.act}));
  // The norm's kernel may prepare q's (and so k's and v's) activations; no other group has a
  // product to prepare for.
  EXPECT_EQ(groups[0].product, l.q);
  EXPECT_EQ(groups[1].product, nullptr);
  EXPECT_EQ(groups[2].product, nullptr);
  // The SWIGLU placed over the activations (the allocator reused them): not fused.
  const std::vector<FusedGroup> reused = PlanFusion(
      l.graph.nodes, [&](const Tensor* t) { return t == l.act ? Apart(l.v) : Apart(t); },
      kAnyColumns);
  EXPECT_EQ(reused.back().kind, FusionKind::kSingle);
  EXPECT_EQ(reused.back().nodes[0], l.act);
}

// Products of more activation columns than the device's fused kernel takes (the layer has 3)
// stay apart; the norm fuses whatever the columns.
TEST(FusionTest, ProductsOfMoreColumnsThanTheKernelTakesStayApart) {
  for (const int64_t max_columns : {int64_t{0}, int64_t{2}}) {
    Layer l;
    BuildLayer(&l, true);
    const std::vector<FusedGroup> groups = PlanFusion(l.graph.nodes, Apart, max_columns);
    ASSERT_FALSE(groups.empty());
    EXPECT_EQ(groups[0].kind, FusionKind::kRmsNormMul);
    // Unfused products still take their activations from the norm's kernel: only q's here,
    // the one recorded right after it.
    EXPECT_EQ(groups[0].product, l.q) << "max_columns " << max_columns;
    for (size_t i = 1; i < groups.size(); ++i) {
      EXPECT_EQ(groups[i].kind, FusionKind::kSingle) << "max_columns " << max_columns;
    }
  }
  Layer l;
  BuildLayer(&l, false);
  EXPECT_EQ(Kinds(PlanFusion(l.graph.nodes, Apart, 3)),
            (std::vector<FusionKind>{FusionKind::kRmsNormMul, FusionKind::kMulMatMulti,
                                     FusionKind::kGateUpSwiglu}));
}

// Products of different activations, or a SWIGLU of other operands, stay apart.
TEST(FusionTest, UnrelatedNeighboursStayApart) {
  Context c;
  Tensor* x = *c.NewTensor(DType::kF32, {64, 2});
  Tensor* y = *c.NewTensor(DType::kF32, {64, 2});
  Tensor* w1 = *c.NewTensor(DType::kF16, {64, 16});
  Tensor* w2 = *c.NewTensor(DType::kF16, {64, 16});
  Tensor* p1 = *MulMat(c, w1, x);
  Tensor* p2 = *MulMat(c, w2, y);
  Tensor* s = *Swiglu(c, p2, p1);  // operands swapped: not gate x, up x of one input.
  Graph g = *BuildGraph({s});
  for (const FusedGroup& grp : PlanFusion(g.nodes, Apart, kAnyColumns)) {
    EXPECT_EQ(grp.kind, FusionKind::kSingle);
  }
}

// The norm's kernel prepares activations only for a product of its own result recorded right
// after it.
TEST(FusionTest, TheNormPreparesOnlyTheNextProductOfItsResult) {
  Context c;
  Tensor* x = *c.NewTensor(DType::kF32, {64, 2});
  Tensor* y = *c.NewTensor(DType::kF32, {64, 2});
  Tensor* w = *c.NewTensor(DType::kF32, {64});
  Tensor* wq = *c.NewTensor(DType::kQ8_0, {64, 16});
  Tensor* norm = *RmsNorm(c, x, 1e-5f);
  Tensor* normed = *Mul(c, norm, w);
  Tensor* of_normed = *MulMat(c, wq, normed);
  Tensor* of_y = *MulMat(c, wq, y);
  const std::vector<Tensor*> first = {norm, normed, of_normed, of_y};
  const std::vector<Tensor*> second = {norm, normed, of_y, of_normed};
  EXPECT_EQ(PlanFusion(first, Apart, 0)[0].product, of_normed);
  EXPECT_EQ(PlanFusion(second, Apart, 0)[0].product, nullptr);
}

// A residual sum before the norm joins its group when it adds two like tensors; where the
// allocator put the group's results over the sum's operands, only exactly in place.
TEST(FusionTest, TheSumBeforeTheNormJoinsItsGroup) {
  Context c;
  Tensor* x = *c.NewTensor(DType::kF32, {64, 2});
  Tensor* z = *c.NewTensor(DType::kF32, {64, 2});
  Tensor* row = *c.NewTensor(DType::kF32, {64, 1});
  Tensor* w = *c.NewTensor(DType::kF32, {64});
  Tensor* wq = *c.NewTensor(DType::kQ8_0, {64, 16});
  Tensor* sum = *Add(c, x, z);
  Tensor* norm = *RmsNorm(c, sum, 1e-5f);
  Tensor* normed = *Mul(c, norm, w);
  Tensor* q = *MulMat(c, wq, normed);
  const std::vector<Tensor*> order = {sum, norm, normed, q};
  std::vector<FusedGroup> groups = PlanFusion(order, Apart, kAnyColumns);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].kind, FusionKind::kAddRmsNormMul);
  EXPECT_EQ(groups[0].nodes, (std::vector<const Tensor*>{sum, norm, normed}));
  EXPECT_EQ(groups[0].product, q);
  // The norm exactly over x (in place): still one group; shifted by one element: apart.
  const std::vector<const Tensor*> tensors = {x, z, w, wq, sum, norm, normed, q};
  auto over_x = [&](uint64_t shift) {  // each tensor its bytes at 1 MiB apart, the norm on x's.
    return [=](const Tensor* t) {
      const uint64_t slot =
          std::find(tensors.begin(), tensors.end(), t == norm ? x : t) - tensors.begin();
      const uint64_t begin = (slot << 20) + (t == norm ? 4 * shift : 0);
      return AddressRange{begin, begin + t->NumBytes()};
    };
  };
  EXPECT_EQ(PlanFusion(order, over_x(0), kAnyColumns)[0].kind, FusionKind::kAddRmsNormMul);
  groups = PlanFusion(order, over_x(1), kAnyColumns);
  EXPECT_EQ(Kinds(groups), (std::vector<FusionKind>{FusionKind::kSingle, FusionKind::kRmsNormMul,
                                                    FusionKind::kSingle}));
  // A broadcast row added: not a plain sum.
  Tensor* bsum = *Add(c, x, row);
  Tensor* bnorm = *RmsNorm(c, bsum, 1e-5f);
  Tensor* bnormed = *Mul(c, bnorm, w);
  groups = PlanFusion(std::vector<Tensor*>{bsum, bnorm, bnormed}, Apart, kAnyColumns);
  EXPECT_EQ(Kinds(groups), (std::vector<FusionKind>{FusionKind::kSingle, FusionKind::kRmsNormMul}));
}

}  // namespace
}  // namespace tg::vulkan
