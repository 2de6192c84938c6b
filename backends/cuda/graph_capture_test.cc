// The capture/replay/invalidate decisions of GraphCaptureCache on real graphs (core/ops.h)
// with fake addresses: replay only while every compute node's op, parameters, shapes and
// addresses are unchanged; a changed uid, shape or address drops the capture (and frees
// its CUDA side); uncapturable graphs and refused captures run eagerly.
#include "backends/cuda/graph_capture.h"

#include <memory>
#include <vector>

#include "backends/cuda/graph_testing.h"
#include "core/context.h"
#include "core/graph.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

using Action = GraphCaptureCache::Action;

// Counts its destruction: a dropped capture must free its CUDA side.
class FakeCapture : public CapturedGraph {
 public:
  explicit FakeCapture(int* destroyed) : destroyed_(destroyed) {}
  ~FakeCapture() override { ++*destroyed_; }

 private:
  int* destroyed_;
};

class GraphCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layer_ = testing::BuildDecodeLayer(ctx_, DType::kQ4_0, 256, 512, 1, 64);
    graph_ = *BuildGraph({layer_.out});
    testing::FakePlace(graph_, &arena_);
  }

  // Runs Decide and, for kCapture, a successful capture; returns the action taken.
  Action Run(GraphCaptureCache& cache, const Graph& g, bool capturable = true) {
    const GraphCaptureCache::Decision d = cache.Decide(g, capturable);
    if (d.action == Action::kCapture) cache.Captured(g, std::make_unique<FakeCapture>(&destroyed_));
    if (d.action == Action::kReplay) {
      EXPECT_NE(d.captured, nullptr);
    }
    return d.action;
  }

  Context ctx_;
  testing::DecodeLayer layer_;
  Graph graph_;
  std::vector<char> arena_;
  int destroyed_ = 0;
};

TEST_F(GraphCaptureTest, WarmsUpThenCapturesThenReplays) {
  GraphCaptureCache cache(/*enabled=*/true);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
  EXPECT_EQ(Run(cache, graph_), Action::kCapture);
  for (int step = 0; step < 5; ++step) EXPECT_EQ(Run(cache, graph_), Action::kReplay);
  EXPECT_EQ(cache.stats().replays, 5);
  EXPECT_EQ(cache.stats().captures, 1);
  EXPECT_EQ(cache.n_captured(), 1);
}

TEST_F(GraphCaptureTest, InputContentsDoNotMatter) {
  GraphCaptureCache cache(true);
  Run(cache, graph_);
  Run(cache, graph_);
  // A decode step writes new tokens, positions and a new mask into the same addresses.
  static_cast<int32_t*>(layer_.pos->data)[0] = 41;
  static_cast<float*>(layer_.x->data)[3] = 2.5f;
  EXPECT_EQ(Run(cache, graph_), Action::kReplay);
}

TEST_F(GraphCaptureTest, ChangedOpParameterInvalidates) {
  GraphCaptureCache cache(true);
  Run(cache, graph_);
  Run(cache, graph_);
  const uint64_t uid = TopologyUid(graph_);
  layer_.q_rope->SetParamF32(3, 500000.0f);  // another rope base: another uid.
  ASSERT_NE(TopologyUid(graph_), uid);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
  EXPECT_EQ(destroyed_, 1);
  EXPECT_EQ(cache.stats().invalidations, 1);
  EXPECT_EQ(Run(cache, graph_), Action::kCapture);
  EXPECT_EQ(Run(cache, graph_), Action::kReplay);
}

TEST_F(GraphCaptureTest, ChangedShapeInvalidates) {
  GraphCaptureCache cache(true);
  Run(cache, graph_);
  Run(cache, graph_);
  // The same graph object rebuilt with fewer tokens (the shape of a view and its consumers).
  layer_.x->ne[1] = 2;
  SetContiguousStrides(layer_.x);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
  EXPECT_EQ(destroyed_, 1);
}

TEST_F(GraphCaptureTest, ReallocatedBufferInvalidates) {
  GraphCaptureCache cache(true);
  Run(cache, graph_);
  Run(cache, graph_);
  EXPECT_EQ(Run(cache, graph_), Action::kReplay);
  const uint64_t uid = TopologyUid(graph_);
  std::vector<char> other;
  testing::FakePlace(graph_, &other);  // every tensor moves, the topology stays.
  EXPECT_EQ(TopologyUid(graph_), uid);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
  EXPECT_EQ(destroyed_, 1);
}

TEST_F(GraphCaptureTest, OneMovedWeightInvalidates) {
  GraphCaptureCache cache(true);
  Run(cache, graph_);
  Run(cache, graph_);
  Tensor* w = layer_.gate->src[0];
  w->data = static_cast<char*>(w->data) + 256;
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
}

TEST_F(GraphCaptureTest, ChangedViewStridesOfASourceInvalidate) {
  GraphCaptureCache cache(true);
  Run(cache, graph_);
  Run(cache, graph_);
  // The view feeding ROPE launches nothing itself, but its strides are the kernel's arguments.
  Tensor* q_view = layer_.q_rope->src[0];
  ASSERT_TRUE(q_view->IsView());
  std::swap(q_view->nb[1], q_view->nb[2]);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
}

TEST_F(GraphCaptureTest, UncapturableGraphsRunEagerlyAndDropTheirCapture) {
  GraphCaptureCache cache(true);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Run(cache, graph_, /*capturable=*/false), Action::kEager);
  EXPECT_EQ(cache.stats().captures, 0);
  Run(cache, graph_);
  Run(cache, graph_);
  ASSERT_EQ(Run(cache, graph_), Action::kReplay);
  // E.g. the same graph object now holds a node whose kernel syncs with the host mid-graph.
  EXPECT_EQ(Run(cache, graph_, false), Action::kEager);
  EXPECT_EQ(destroyed_, 1);
  EXPECT_EQ(cache.n_captured(), 0);
}

TEST_F(GraphCaptureTest, RefusedCaptureRunsEagerlyUntilTheGraphChanges) {
  GraphCaptureCache cache(true);
  cache.Decide(graph_, true);
  ASSERT_EQ(cache.Decide(graph_, true).action, Action::kCapture);
  cache.Captured(graph_, nullptr);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
  layer_.x->data = static_cast<char*>(layer_.x->data) + 256;  // changed: tried again.
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
  EXPECT_EQ(Run(cache, graph_), Action::kCapture);
}

TEST_F(GraphCaptureTest, StopsCapturingAfterRepeatedRefusals) {
  GraphCaptureCache cache(true);
  for (int i = 0; i < kMaxCaptureFailures; ++i) {
    layer_.x->data = static_cast<char*>(layer_.x->data) + 256;
    cache.Decide(graph_, true);
    ASSERT_EQ(cache.Decide(graph_, true).action, Action::kCapture);
    cache.Captured(graph_, nullptr);
  }
  EXPECT_FALSE(cache.enabled());
  layer_.x->data = static_cast<char*>(layer_.x->data) + 256;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Run(cache, graph_), Action::kEager);
}

TEST_F(GraphCaptureTest, DisabledNeverCaptures) {
  GraphCaptureCache cache(/*enabled=*/false);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Run(cache, graph_), Action::kEager);
}

TEST_F(GraphCaptureTest, KeepsOneCapturePerGraphAndEvictsTheLeastRecentlyUsed) {
  Context ctx2, ctx3;
  testing::DecodeLayer l2 = testing::BuildDecodeLayer(ctx2, DType::kQ8_0, 256, 256, 1, 64);
  testing::DecodeLayer l3 = testing::BuildDecodeLayer(ctx3, DType::kQ4_K, 256, 256, 1, 64);
  Graph g2 = *BuildGraph({l2.out}), g3 = *BuildGraph({l3.out});
  std::vector<char> a2, a3;
  testing::FakePlace(g2, &a2);
  testing::FakePlace(g3, &a3);
  GraphCaptureCache cache(true, /*max_graphs=*/2);
  // Two graphs alternating (as a split model's pieces on one stream) both stay captured.
  for (int round = 0; round < 2; ++round) {
    Run(cache, graph_);
    Run(cache, g2);
  }
  EXPECT_EQ(Run(cache, graph_), Action::kReplay);
  EXPECT_EQ(Run(cache, g2), Action::kReplay);
  // A third one pushes out the least recently used (graph_).
  EXPECT_EQ(Run(cache, g3), Action::kEager);
  EXPECT_EQ(destroyed_, 1);
  EXPECT_EQ(Run(cache, g2), Action::kReplay);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
  EXPECT_EQ(cache.stats().evictions, 1);
}

TEST_F(GraphCaptureTest, ClearDropsEveryCapture) {
  GraphCaptureCache cache(true);
  Run(cache, graph_);
  Run(cache, graph_);
  cache.Clear();
  EXPECT_EQ(destroyed_, 1);
  EXPECT_EQ(Run(cache, graph_), Action::kEager);
}

TEST(GraphSignatureTest, EveryUidChangeChangesTheSignature) {
  // Whatever the topology hash sees (ops, params, shapes, strides, wiring) the records see.
  for (int variant = 0; variant < 4; ++variant) {
    Context ctx;
    testing::DecodeLayer l = testing::BuildDecodeLayer(ctx, DType::kF16, 128, 256, 2, 32);
    Graph g = *BuildGraph({l.out});
    std::vector<char> arena;
    testing::FakePlace(g, &arena);
    const GraphSignature sig = GraphSignature::Of(g);
    ASSERT_TRUE(sig.Matches(g));
    const uint64_t uid = TopologyUid(g);
    switch (variant) {
      case 0:
        l.norm->SetParamF32(0, 1e-6f);
        break;
      case 1:
        std::swap(l.swiglu->src[0], l.swiglu->src[1]);
        break;
      case 2:
        l.k_rope->op_params[1] = kRopeNeox;
        break;
      case 3:
        l.up->src[1] = l.x;  // rewired to another source of the same shape.
        break;
    }
    EXPECT_NE(TopologyUid(g), uid) << variant;
    EXPECT_FALSE(sig.Matches(g)) << variant;
  }
}

TEST(GraphSignatureTest, CountsOnlyNodesThatLaunchWork) {
  Context ctx;
  testing::DecodeLayer l = testing::BuildDecodeLayer(ctx, DType::kF32, 64, 128, 1, 32);
  Graph g = *BuildGraph({l.out});
  std::vector<char> arena;
  testing::FakePlace(g, &arena);
  size_t compute = 0;
  for (const Tensor* n : g.nodes) compute += IsViewOp(n->op) ? 0 : 1;
  EXPECT_EQ(GraphSignature::Of(g).n_nodes(), compute);
  EXPECT_LT(compute, g.nodes.size());  // the reshapes are views.
}

}  // namespace
}  // namespace tg::cuda
