// graph_encoder against an independent decode: server/graph_decoder turns the GraphDesc back
// into tensors, which must match the encoded graph tensor by tensor (type, shape, strides,
// op, params, sources, views, memory) and compute the same result on the CPU; plus the
// fields of a small graph checked by hand, and what the graph key tells apart.
#include "client/graph_encoder.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/register_builtin.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "server/graph_decoder.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

constexpr uint64_t kHandle = 77;

// s = Scale(MulMat(w, x), 0.5, 1), wtc = Cont(Transpose(w)) and rowc = Cont(row 1 of s),
// with w a weight and x an input, all in one CPU buffer that stands for the server's
// buffer kHandle.
struct TestGraph {
  explicit TestGraph(float scale = 0.5f, int64_t row_index = 1, int64_t row_len = 3) {
    Device* cpu = Registry::Get().CpuDevice();
    w = *ctx.NewTensor(DType::kF32, {4, 3});
    x = *ctx.NewTensor(DType::kF32, {4, 2});
    w->flags |= kFlagWeight | kFlagInput;  // inputs keep their own memory.
    x->flags |= kFlagInput;
    y = *MulMat(ctx, w, x);
    s = *Scale(ctx, y, scale, 1.0f);
    wt = *Transpose(ctx, w);
    wtc = *Cont(ctx, wt);
    row = *View(ctx, s, {row_len}, {}, row_index * 3 * sizeof(float));
    rowc = *Cont(ctx, row);
    for (auto [t, name] : {std::pair{w, "w"},
                           {x, "x"},
                           {y, "y"},
                           {s, "s"},
                           {wt, "wt"},
                           {wtc, "wtc"},
                           {row, "row"},
                           {rowc, "rowc"}}) {
      t->SetName(name);
    }
    graph = *BuildGraph({s, wtc, rowc});
    allocator = std::make_unique<GraphAllocator>(cpu->default_buffer_type());
    ok = allocator->Allocate(graph).ok() && w->buffer == allocator->buffer() &&
         x->buffer == allocator->buffer();
  }

  LocateFn Locate() const {
    Buffer* buffer = allocator->buffer();
    return [buffer](const Tensor& t) -> absl::StatusOr<RemoteLocation> {
      if (t.buffer != buffer) return absl::InvalidArgumentError(absl::StrCat(t.name, " elsewhere"));
      return RemoteLocation{kHandle, static_cast<uint64_t>(static_cast<const char*>(t.data) -
                                                           static_cast<char*>(buffer->base()))};
    };
  }

  server::BufferResolver Resolver() const {
    Buffer* buffer = allocator->buffer();
    return [buffer](uint64_t handle) -> absl::StatusOr<server::ResolvedBuffer> {
      if (handle != kHandle) return absl::NotFoundError(absl::StrCat("handle ", handle));
      return server::ResolvedBuffer{buffer, buffer->size()};
    };
  }

  Context ctx;
  Tensor *w, *x, *y, *s, *wt, *wtc, *row, *rowc;
  Graph graph;
  std::unique_ptr<GraphAllocator> allocator;
  bool ok = false;
};

class GraphEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(RegisterBuiltinBackends().ok()); }
};

void ExpectSameTensor(const Tensor& want, const Tensor& got) {
  SCOPED_TRACE(want.name);
  EXPECT_EQ(got.type, want.type);
  for (int i = 0; i < kMaxDims; ++i) {
    EXPECT_EQ(got.ne[i], want.ne[i]);
    EXPECT_EQ(got.nb[i], want.nb[i]);
  }
  EXPECT_EQ(got.data, want.data);
  if (want.op == Op::kNone) return;
  EXPECT_EQ(got.op, want.op);
  EXPECT_EQ(got.flags, want.flags);
  EXPECT_EQ(std::memcmp(got.op_params, want.op_params, sizeof(want.op_params)), 0);
  for (int i = 0; i < kMaxSrc; ++i) {
    ASSERT_EQ(got.src[i] == nullptr, want.src[i] == nullptr);
    if (want.src[i] != nullptr) {
      EXPECT_STREQ(got.src[i]->name, want.src[i]->name);
    }
  }
  ASSERT_EQ(got.view_src == nullptr, want.view_src == nullptr);
  if (want.view_src != nullptr) {
    EXPECT_STREQ(got.view_src->name, want.view_src->name);
    EXPECT_EQ(got.view_offs, want.view_offs);
  }
}

TEST_F(GraphEncoderTest, TheServersDecoderGetsTheSameGraphBack) {
  TestGraph g;
  ASSERT_TRUE(g.ok);
  auto encoded = EncodeGraph(g.graph, g.Locate());
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  Device* cpu = Registry::Get().CpuDevice();
  auto decoded = server::DecodeGraph(encoded->desc, cpu, g.Resolver());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  absl::flat_hash_map<std::string, const Tensor*> by_name;
  for (const Tensor* t : (*decoded)->tensors) by_name[t->name] = t;
  EXPECT_EQ(by_name.size(), 8);
  for (const Tensor* t : {g.w, g.x, g.y, g.s, g.wt, g.wtc, g.row, g.rowc}) {
    ASSERT_TRUE(by_name.contains(t->name)) << t->name;
    ExpectSameTensor(*t, *by_name[t->name]);
  }
  EXPECT_EQ((*decoded)->handles, std::vector<uint64_t>{kHandle});

  // And it computes what the original computes.
  const std::vector<float> w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<float> x = {1, 0, -1, 2, 0.5f, 0.5f, 0.5f, 0.5f};
  ASSERT_TRUE(g.w->buffer->SetTensor(g.w, w.data(), 0, 48).ok());
  ASSERT_TRUE(g.x->buffer->SetTensor(g.x, x.data(), 0, 32).ok());
  auto stream = *cpu->CreateStream();
  ASSERT_TRUE(stream->Compute(g.graph).ok());
  std::vector<float> s1(6), wtc1(12), rowc1(3), s2(6, -1), wtc2(12, -1), rowc2(3, -1);
  ASSERT_TRUE(g.s->buffer->GetTensor(g.s, s1.data(), 0, 24).ok());
  ASSERT_TRUE(g.wtc->buffer->GetTensor(g.wtc, wtc1.data(), 0, 48).ok());
  ASSERT_TRUE(g.rowc->buffer->GetTensor(g.rowc, rowc1.data(), 0, 12).ok());
  ASSERT_TRUE(g.s->buffer->SetTensor(g.s, s2.data(), 0, 24).ok());
  ASSERT_TRUE(g.wtc->buffer->SetTensor(g.wtc, wtc2.data(), 0, 48).ok());
  ASSERT_TRUE(g.rowc->buffer->SetTensor(g.rowc, rowc2.data(), 0, 12).ok());
  ASSERT_TRUE(stream->Compute((*decoded)->graph).ok());
  ASSERT_TRUE(g.s->buffer->GetTensor(g.s, s2.data(), 0, 24).ok());
  ASSERT_TRUE(g.wtc->buffer->GetTensor(g.wtc, wtc2.data(), 0, 48).ok());
  ASSERT_TRUE(g.rowc->buffer->GetTensor(g.rowc, rowc2.data(), 0, 12).ok());
  EXPECT_EQ(s2, s1);
  EXPECT_EQ(wtc2, wtc1);
  EXPECT_EQ(rowc2, rowc1);
  EXPECT_EQ(rowc1, std::vector<float>(s1.begin() + 3, s1.end()));
  // s[i, j] = 0.5 * dot(row i of w, row j of x) + 1, by hand for two entries.
  EXPECT_EQ(s1[0], 0.5f * (1 - 3 + 8) + 1);
  EXPECT_EQ(s1[5], 0.5f * 0.5f * (9 + 10 + 11 + 12) + 1);
}

// a + b: two leafs, then the node; ids in dependency order from 1.
TEST_F(GraphEncoderTest, TheFieldsOfASmallGraph) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {8});
  Tensor* b = *ctx.NewTensor(DType::kF32, {8});
  Tensor* c = *Add(ctx, a, b);
  c->SetName("c");
  Graph graph = *BuildGraph({c});
  BufferType* type = Registry::Get().CpuDevice()->default_buffer_type();
  const uint64_t step = std::max<uint64_t>(32, type->alignment());
  auto buffer = *type->Allocate(3 * step);
  absl::flat_hash_map<const Tensor*, uint64_t> offsets = {{a, 0}, {b, step}, {c, 2 * step}};
  for (Tensor* t : {a, b, c}) ASSERT_TRUE(PlaceTensor(buffer.get(), t, offsets[t]).ok());
  LocateFn locate = [&](const Tensor& t) -> absl::StatusOr<RemoteLocation> {
    return RemoteLocation{5, offsets.at(&t)};
  };
  auto encoded = EncodeGraph(graph, locate);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  const pb::GraphDesc& desc = encoded->desc;
  ASSERT_EQ(desc.tensors_size(), 3);
  ASSERT_EQ(desc.nodes_size(), 1);
  EXPECT_EQ(desc.nodes(0), 3);
  for (int i = 0; i < 2; ++i) {
    const pb::TensorDesc& leaf = desc.tensors(i);
    EXPECT_EQ(leaf.id(), i + 1);
    EXPECT_EQ(leaf.op(), 0);
    EXPECT_EQ(leaf.buffer(), 5);
    EXPECT_EQ(leaf.offset(), step * i);
    EXPECT_EQ(leaf.src_size(), 0);
    EXPECT_EQ(leaf.type(), static_cast<uint32_t>(DType::kF32));
    ASSERT_EQ(leaf.ne_size(), 4);
    EXPECT_EQ(leaf.ne(0), 8);
    EXPECT_EQ(leaf.nb(0), 4);
    EXPECT_EQ(leaf.nb(1), 32);
  }
  const pb::TensorDesc& node = desc.tensors(2);
  EXPECT_EQ(node.id(), 3);
  EXPECT_EQ(node.op(), static_cast<uint32_t>(Op::kAdd));
  EXPECT_EQ(node.name(), "c");
  ASSERT_EQ(node.src_size(), 2);
  EXPECT_EQ(node.src(0), 1);
  EXPECT_EQ(node.src(1), 2);
  EXPECT_EQ(node.buffer(), 5);
  EXPECT_EQ(node.offset(), 2 * step);
  EXPECT_TRUE(node.op_params().empty());  // trailing zero params are not sent.
  EXPECT_EQ(node.flags(), c->flags);
}

TEST_F(GraphEncoderTest, TheKeyTellsGraphsApart) {
  TestGraph g;
  TestGraph same;
  TestGraph other_scale(0.25f), other_row(0.5f, 0), shorter_row(0.5f, 1, 2);
  ASSERT_TRUE(g.ok && same.ok && other_scale.ok && other_row.ok && shorter_row.ok);
  auto key = GraphKey(g.graph, g.Locate());
  ASSERT_TRUE(key.ok()) << key.status();
  auto encoded = EncodeGraph(g.graph, g.Locate());
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(encoded->key, *key);  // the key-only path hashes the same fields.
  // Same shapes, names and locations in another Context: the server's cached graph fits.
  EXPECT_EQ(*GraphKey(same.graph, same.Locate()), *key);
  EXPECT_NE(*GraphKey(other_scale.graph, other_scale.Locate()), *key);  // an op param.
  EXPECT_NE(*GraphKey(other_row.graph, other_row.Locate()), *key);      // a view offset.
  EXPECT_NE(*GraphKey(shorter_row.graph, shorter_row.Locate()), *key);  // a shape.
  LocateFn shifted = [&](const Tensor& t) -> absl::StatusOr<RemoteLocation> {
    auto loc = g.Locate()(t);
    if (loc.ok() && &t == g.x) loc->offset += 4;
    return loc;
  };
  EXPECT_NE(*GraphKey(g.graph, shifted), *key);  // a location.
  g.y->SetName("renamed");
  EXPECT_NE(*GraphKey(g.graph, g.Locate()), *key);  // a name.
}

TEST_F(GraphEncoderTest, TensorsNotOnTheServerAreRefused) {
  TestGraph g;
  ASSERT_TRUE(g.ok);
  LocateFn nowhere = [](const Tensor& t) -> absl::StatusOr<RemoteLocation> {
    return absl::InvalidArgumentError(absl::StrCat(t.name, " is not on this server"));
  };
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeGraph(g.graph, nowhere).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(GraphKey(g.graph, nowhere).status()));

  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {8});
  a->SetName("unplaced");
  Tensor* c = *Add(ctx, a, a);
  Graph graph = *BuildGraph({c});
  const absl::Status s = EncodeGraph(graph, g.Locate()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("unplaced"), std::string::npos) << s;
}

}  // namespace
}  // namespace tg::rpc
