// Graph construction: topological order, leafs, cycle detection, topology uid.
#include "core/graph.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/context.h"
#include "core/ops.h"

namespace tg {
namespace {

TEST(GraphTest, NodesFollowTheirSources) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* b = *ctx.NewTensor(DType::kF32, {8});
  Tensor* s = *Add(ctx, a, b);
  Tensor* n = *RmsNorm(ctx, s, 1e-5f);
  Tensor* t = *Transpose(ctx, n);
  Tensor* c = *Cont(ctx, t);
  Tensor* out = *Mul(ctx, *Scale(ctx, c, 2.0f), c);
  auto g = BuildGraph({out});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->leafs.size(), 2u);
  EXPECT_EQ(g->nodes.size(), 6u);
  auto pos = [&](const Tensor* x) {
    return std::find(g->nodes.begin(), g->nodes.end(), x) - g->nodes.begin();
  };
  for (Tensor* node : g->nodes) {
    for (Tensor* src : node->src) {
      if (src != nullptr && src->op != Op::kNone) {
        EXPECT_LT(pos(src), pos(node));
      }
    }
  }
  EXPECT_TRUE(out->HasFlag(kFlagOutput));
}

TEST(GraphTest, CycleIsAnError) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4});
  Tensor* x = *Scale(ctx, a, 1.0f);
  Tensor* y = *Scale(ctx, x, 1.0f);
  x->src[0] = y;  // as a hostile peer could send.
  auto g = BuildGraph({y});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("cycle"), absl::string_view::npos);
}

TEST(GraphTest, TooManyNodesIsAnError) {
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {4});
  for (int i = 0; i < 100; ++i) x = *Scale(ctx, x, 1.0f);
  EXPECT_EQ(BuildGraph({x}, 50).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(GraphTest, DeepChainsDoNotOverflowTheStack) {
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {4});
  for (int i = 0; i < 200000; ++i) x = *Scale(ctx, x, 1.0f);
  auto g = BuildGraph({x});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->nodes.size(), 200000u);
}

// The uid depends on topology (ops, shapes, params, wiring) and not on data or names.
TEST(GraphTest, UidTracksTopologyOnly) {
  auto build = [](int64_t n, float scale, const char* name) {
    auto ctx = std::make_unique<Context>();
    Tensor* a = *ctx->NewTensor(DType::kF32, {n, 3});
    Tensor* out = *Scale(*ctx, *Silu(*ctx, a), scale);
    out->SetName(name);
    uint64_t uid = BuildGraph({out})->uid();
    return uid;
  };
  EXPECT_EQ(build(8, 2.0f, "x"), build(8, 2.0f, "y"));
  EXPECT_NE(build(8, 2.0f, "x"), build(9, 2.0f, "x"));
  EXPECT_NE(build(8, 2.0f, "x"), build(8, 3.0f, "x"));
}

}  // namespace
}  // namespace tg
