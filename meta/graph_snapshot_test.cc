// GraphSnapshot (meta/graph_snapshot.h): a graph matches its snapshot only while every field
// of every tensor is as recorded.
#include "meta/graph_snapshot.h"

#include <functional>
#include <string>

#include "core/context.h"
#include "core/ops.h"
#include "gtest/gtest.h"

namespace tg::meta {
namespace {

struct Small {
  Context ctx;
  Tensor* w = nullptr;
  Tensor* x = nullptr;
  Tensor* y = nullptr;
  Tensor* z = nullptr;
  Graph graph;

  Small() {
    w = *ctx.NewTensor(DType::kF32, {8, 4});
    x = *ctx.NewTensor(DType::kF32, {8, 2});
    y = *MulMat(ctx, w, x);
    z = *Scale(ctx, y, 0.5f);
    graph = *BuildGraph({z});
  }
};

TEST(GraphSnapshotTest, MatchesTheGraphItTookUntilAFieldChanges) {
  const std::vector<std::pair<std::string, std::function<void(Small&)>>> changes = {
      {"a shape", [](Small& s) { s.y->ne[1] = 3; }},
      {"a stride", [](Small& s) { s.z->nb[1] += 4; }},
      {"an op parameter", [](Small& s) { s.z->SetParamF32(0, 2.0f); }},
      {"a source", [](Small& s) { s.z->src[0] = s.x; }},
      {"memory", [](Small& s) { s.x->data = reinterpret_cast<void*>(uintptr_t{4096}); }},
      {"a flag", [](Small& s) { s.z->flags ^= kFlagOutput; }},
      {"a name", [](Small& s) { s.y->SetName("renamed"); }},
      {"the type", [](Small& s) { s.w->type = DType::kF16; }},
      {"the op", [](Small& s) { s.z->op = Op::kAdd; }},
  };
  for (const auto& [what, change] : changes) {
    Small s;
    GraphSnapshot snap;
    EXPECT_FALSE(snap.Matches(s.graph)) << "an empty snapshot matches nothing";
    snap.Take(s.graph);
    EXPECT_TRUE(snap.Matches(s.graph));
    change(s);
    EXPECT_FALSE(snap.Matches(s.graph)) << what;
  }
}

TEST(GraphSnapshotTest, AnotherGraphOfTheSameShapeDoesNotMatch) {
  Small a;
  Small b;
  GraphSnapshot snap;
  snap.Take(a.graph);
  EXPECT_FALSE(snap.Matches(b.graph));  // other tensors, same fields.
  Graph fewer = a.graph;
  fewer.nodes.pop_back();
  EXPECT_FALSE(snap.Matches(fewer));
  snap.Clear();
  EXPECT_FALSE(snap.Matches(a.graph));
}

}  // namespace
}  // namespace tg::meta
