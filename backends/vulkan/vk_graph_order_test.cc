// OrderForFewerBarriers on hand-placed tensors: independent nodes are pulled into one barrier
// interval, dependencies and reused memory keep their order. No Vulkan device needed.
#include "backends/vulkan/vk_graph_order.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/context.h"
#include "core/ops.h"

namespace tg::vulkan {
namespace {

// Fake device addresses: each tensor's data is a made-up address; ranges come from them.
AddressRange RangeOfFake(const Tensor* t) {
  const auto a = reinterpret_cast<uint64_t>(t->data);
  return {a, a + t->NumBytes()};
}

void Place(Tensor* t, uint64_t address) { t->data = reinterpret_cast<void*>(address); }

int Position(const std::vector<Tensor*>& order, const Tensor* t) {
  return static_cast<int>(std::find(order.begin(), order.end(), t) - order.begin());
}

// x -> norm -> {q, k, v} = matmuls of norm, then q2 = rope(q), k2 = rope(k): recorded as
// built (norm, q, q2, k, k2, v) that takes three barriers; reordered,
// the three matmuls and then the two ropes share intervals.
TEST(GraphOrderTest, IndependentNodesShareABarrierInterval) {
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {64, 4});
  Tensor* wq = *ctx.NewTensor(DType::kF32, {64, 64});
  Tensor* wk = *ctx.NewTensor(DType::kF32, {64, 64});
  Tensor* wv = *ctx.NewTensor(DType::kF32, {64, 64});
  Tensor* pos = *ctx.NewTensor(DType::kI32, {4});
  Tensor* norm = *RmsNorm(ctx, x, 1e-5f);
  Tensor* q = *MulMat(ctx, wq, norm);
  Tensor* k = *MulMat(ctx, wk, norm);
  Tensor* v = *MulMat(ctx, wv, norm);
  Tensor* q3 = *Reshape(ctx, q, {16, 4, 4});
  Tensor* k3 = *Reshape(ctx, k, {16, 4, 4});
  RopeParams rp;
  rp.n_dims = 16;
  Tensor* q2 = *Rope(ctx, q3, pos, nullptr, rp);
  Tensor* k2 = *Rope(ctx, k3, pos, nullptr, rp);
  uint64_t next = 0x10000;
  for (Tensor* t : {x, wq, wk, wv, pos, norm, q, k, v, q2, k2}) {
    Place(t, next);
    next += 0x10000;
  }
  q3->data = q->data;
  k3->data = k->data;
  std::vector<Tensor*> built = {norm, q, q3, q2, k, k3, k2, v};
  const int before = CountBarriers(built, RangeOfFake);
  const std::vector<Tensor*> order = OrderForFewerBarriers(built, RangeOfFake);
  const int after = CountBarriers(order, RangeOfFake);
  EXPECT_EQ(before, 3);  // norm | q | q2 k | k2 v.
  EXPECT_EQ(after, 2);   // norm | q k v | ropes.
  ASSERT_EQ(order.size(), built.size());
  for (Tensor* n : built) {
    for (const Tensor* s : n->src) {
      if (s != nullptr && Position(order, s) < static_cast<int>(order.size())) {
        EXPECT_LT(Position(order, s), Position(order, n)) << n->op_params[0];
      }
    }
  }
}

// A node whose output reuses memory that a node it would pass still reads (the graph
// allocator freed it after that read) must not move ahead of it, though it depends on nothing.
TEST(GraphOrderTest, ReusedMemoryKeepsItsOrder) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {256});
  Tensor* b = *ctx.NewTensor(DType::kF32, {256});
  Tensor* c = *ctx.NewTensor(DType::kF32, {256});
  Tensor* n0 = *Silu(ctx, a);
  Tensor* n1 = *Add(ctx, n0, c);  // must wait for n0, reads c.
  Tensor* n2 = *Silu(ctx, b);     // independent, written over c's memory once n1 read it.
  Place(a, 0x1000);
  Place(b, 0x3000);
  Place(c, 0x5000);
  Place(n0, 0x7000);
  Place(n1, 0x9000);
  Place(n2, 0x5000);
  EXPECT_EQ(OrderForFewerBarriers({n0, n1, n2}, RangeOfFake), (std::vector<Tensor*>{n0, n1, n2}));
  // With memory of its own, n2 joins n0's interval.
  Place(n2, 0xb000);
  EXPECT_EQ(OrderForFewerBarriers({n0, n1, n2}, RangeOfFake), (std::vector<Tensor*>{n0, n2, n1}));
}

}  // namespace
}  // namespace tg::vulkan
