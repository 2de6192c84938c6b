// Graph allocator: memory of dead tensors is reused, but no two tensors that are live at the
// same time overlap (checked by an independent liveness computation here), inputs and outputs
// keep their memory, and a graph computed in the reused memory gives the right numbers.
#include "core/graph_allocator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/context.h"
#include "core/ops.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

// A long chain y_{i+1} = silu(y_i) * 0.5 + x: each intermediate dies quickly.
struct Chain {
  Context ctx;
  Tensor* x;
  Tensor* out;
  Graph graph;
};

std::unique_ptr<Chain> MakeChain(int64_t n, int steps) {
  auto c = std::make_unique<Chain>();
  c->x = *c->ctx.NewTensor(DType::kF32, {n, 4});
  c->x->flags |= kFlagInput;
  Tensor* y = c->x;
  for (int i = 0; i < steps; ++i) {
    y = *Add(c->ctx, *Scale(c->ctx, *Silu(c->ctx, y), 0.5f), c->x);
  }
  c->out = y;
  c->graph = *BuildGraph({y});
  return c;
}

// Intervals [first, last] of node indices during which each tensor's memory must be intact.
std::map<const Tensor*, std::pair<int, int>> Lifetimes(const Graph& g) {
  std::map<const Tensor*, std::pair<int, int>> life;
  const int end = static_cast<int>(g.nodes.size());
  // Leafs are written before compute; inputs stay until the end, others until last read.
  for (const Tensor* leaf : g.leafs) life[leaf] = {-1, leaf->HasFlag(kFlagInput) ? end : -1};
  for (int i = 0; i < end; ++i) {
    const Tensor* n = g.nodes[i];
    life[n] = {i, n->HasFlag(kFlagOutput) ? end : i};
    for (const Tensor* s : n->src) {
      if (s == nullptr) continue;
      const Tensor* owner = s->view_src ? s->view_src : s;
      life[owner].second = std::max(life[owner].second, i);
    }
  }
  return life;
}

TEST(GraphAllocatorTest, ReusesMemoryWithoutOverlappingLiveTensors) {
  Device* cpu = testing::CpuDevice();
  ASSERT_NE(cpu, nullptr);
  auto chain = MakeChain(1000, 50);
  GraphAllocator alloc(cpu->default_buffer_type());
  auto plan = alloc.Plan(chain->graph);
  ASSERT_TRUE(plan.ok()) << plan.status();
  size_t total = 0;
  std::map<const Tensor*, size_t> offset;
  for (auto& [t, off] : plan->offsets) {
    total += t->NumBytes();
    offset[t] = off;
  }
  EXPECT_LT(plan->peak * 10, total) << "peak " << plan->peak << " vs no reuse " << total;

  auto life = Lifetimes(chain->graph);
  for (auto& [a, off_a] : offset) {
    for (auto& [b, off_b] : offset) {
      if (a >= b) continue;
      const bool live_together = life[a].first <= life[b].second && life[b].first <= life[a].second;
      const bool overlap = off_a < off_b + b->NumBytes() && off_b < off_a + a->NumBytes();
      EXPECT_FALSE(live_together && overlap) << a->name << " and " << b->name << " overlap";
    }
  }
}

TEST(GraphAllocatorTest, ComputesCorrectlyInReusedMemory) {
  Device* cpu = testing::CpuDevice();
  ASSERT_NE(cpu, nullptr);
  const int64_t n = 257;
  const int steps = 20;
  auto chain = MakeChain(n, steps);
  auto stream = cpu->CreateStream();
  ASSERT_TRUE(stream.ok());
  std::vector<float> x = testing::RandomFloats(n * 4, 7);
  testing::GraphRun run;
  ASSERT_TRUE(
      testing::AllocateAndCompute(cpu, stream->get(), chain->graph, {{chain->x, x}}, &run).ok());
  std::vector<float> got = testing::ReadF32(*chain->out);
  for (size_t i = 0; i < x.size(); ++i) {
    double y = x[i];
    for (int s = 0; s < steps; ++s) y = y / (1.0 + std::exp(-y)) * 0.5 + x[i];
    ASSERT_NEAR(got[i], y, 1e-4 * (1 + std::fabs(y))) << "element " << i;
  }
  // The same allocator serves a second, different graph in the same buffer.
  auto chain2 = MakeChain(n, 3);
  ASSERT_TRUE(
      testing::AllocateAndCompute(cpu, stream->get(), chain2->graph, {{chain2->x, x}}, &run).ok());
  got = testing::ReadF32(*chain2->out);
  double y0 = x[0];
  for (int s = 0; s < 3; ++s) y0 = y0 / (1.0 + std::exp(-y0)) * 0.5 + x[0];
  EXPECT_NEAR(got[0], y0, 1e-4);
}

TEST(GraphAllocatorTest, LeavesPreplacedTensorsAlone) {
  Device* cpu = testing::CpuDevice();
  ASSERT_NE(cpu, nullptr);
  Context ctx;
  Tensor* w = *ctx.NewTensor(DType::kF32, {16, 16});
  auto weights = cpu->default_buffer_type()->Allocate(w->NumBytes());
  ASSERT_TRUE(weights.ok());
  ASSERT_TRUE(PlaceTensor(weights->get(), w, 0).ok());
  Tensor* x = *ctx.NewTensor(DType::kF32, {16, 2});
  Tensor* y = *MulMat(ctx, w, x);
  Graph g = *BuildGraph({y});
  GraphAllocator alloc(cpu->default_buffer_type());
  ASSERT_TRUE(alloc.Allocate(g).ok());
  EXPECT_EQ(w->buffer, weights->get());
  EXPECT_EQ(x->buffer, alloc.buffer());
  EXPECT_EQ(y->buffer, alloc.buffer());
}

}  // namespace
}  // namespace tg
