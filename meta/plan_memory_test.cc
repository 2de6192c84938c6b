// Each device's compute memory for tensor parallelism (PlanMemory): hand-built plans check
// the layout rules (live tensors never overlap, dead ones are reused, collectives' tensors
// outlive the next step, zeros read zero every run, views point into their base, memory is
// shared by plans and grows only when needed); whole graphs on a meta device over counting
// CPU devices check that each device holds no more than its share of the graph (a bound
// the test derives from the graph's shapes and the split) and still computes what one
// device computes.
#include "meta/plan_memory.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_buffer.h"
#include "backends/cpu/cpu_device.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "meta/memory_testing.h"
#include "meta/meta_device.h"
#include "meta/meta_stream.h"
#include "meta/plan_emitter.h"
#include "tests/lib/test_util.h"

namespace tg::meta {
namespace {

bool Overlap(const Tensor* a, const Tensor* b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a->data);
  const auto b0 = reinterpret_cast<uintptr_t>(b->data);
  return a->buffer == b->buffer && a0 < b0 + b->NumBytes() && b0 < a0 + a->NumBytes();
}

// Plans written by hand with the emitter, over two CPU devices; device 0 does the work.
class PlanMemoryTest : public ::testing::Test {
 protected:
  PlanMemoryTest()
      : a_("A", "a", 1),
        b_("B", "b", 1),
        memory_({a_.default_buffer_type(), b_.default_buffer_type()}) {}

  Tensor* Input(int64_t n) {
    Tensor* t = *ctx_.NewTensor(DType::kF32, {n});
    t->flags |= kFlagInput;
    return t;
  }
  Tensor* Next(Tensor* t) { return *Scale(ctx_, t, 0.5f); }
  // Registers x as device 0's shadow of a graph input.
  void AddInput(PartitionPlan& plan, Tensor* x) {
    plan.inputs.push_back({GraphSlot{true, 0}, ShadowSet{SplitState::Mirrored(), {x, nullptr}}});
  }
  void AllReduce(PlanEmitter& emitter, Tensor* t) {
    CommOp op;
    op.dst = {t, nullptr};
    op.zero_fill = {false, true};
    emitter.EmitComm(op);
  }

  cpu::CpuDevice a_;
  cpu::CpuDevice b_;
  PlanMemory memory_;
  Context ctx_;
};

TEST_F(PlanMemoryTest, LiveTensorsNeverOverlapAndDeadOnesAreReused) {
  PartitionPlan plan;
  Tensor* x = Input(1024);
  std::vector<Tensor*> chain = {Next(x)};
  for (int i = 0; i < 5; ++i) chain.push_back(Next(chain.back()));
  Tensor* out = *Add(ctx_, chain.back(), x);
  {
    PlanEmitter emitter(&plan, 2);
    AddInput(plan, x);
    for (Tensor* t : chain) emitter.Emit(0, t);
    emitter.Emit(0, out);
    emitter.Finish();
  }
  ASSERT_TRUE(memory_.Place(plan).ok());
  size_t total = x->NumBytes() + out->NumBytes();
  for (size_t i = 0; i < chain.size(); ++i) {
    total += chain[i]->NumBytes();
    ASSERT_NE(chain[i]->data, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(chain[i]->data) % cpu::kCpuAlignment, 0u);
    EXPECT_FALSE(Overlap(chain[i], x)) << i;  // an input lives throughout.
    if (i > 0) {
      EXPECT_FALSE(Overlap(chain[i], chain[i - 1])) << i;
    }
  }
  EXPECT_FALSE(Overlap(out, chain.back()));
  EXPECT_LE(memory_.bytes(0), 4 * x->NumBytes());  // a chain needs two links at a time.
  EXPECT_LT(memory_.bytes(0), total);
}

// A peer may still read a collective's tensors while this device runs the next step: they
// keep their memory until that step has ended.
TEST_F(PlanMemoryTest, CollectiveTensorsOutliveTheNextStep) {
  PartitionPlan plan;
  Tensor* x = Input(256);
  Tensor* p = Next(x);
  Tensor* q = Next(p);  // reads p for the last time.
  Tensor* r = Next(q);
  Tensor* s = Next(r);
  Tensor* t = Next(s);
  {
    PlanEmitter emitter(&plan, 2);
    AddInput(plan, x);
    emitter.Emit(0, p);
    AllReduce(emitter, p);
    emitter.Emit(0, q);
    emitter.Emit(0, r);
    emitter.Emit(0, s);
    AllReduce(emitter, s);
    emitter.Emit(0, t);
    emitter.Finish();
  }
  ASSERT_TRUE(memory_.Place(plan).ok());
  for (Tensor* later : {q, r, s}) EXPECT_FALSE(Overlap(later, p)) << later->name;
}

TEST_F(PlanMemoryTest, ZerosReadZeroOnEveryRun) {
  PartitionPlan plan;
  Tensor* x = Input(64);
  Tensor* zeros = *ctx_.NewTensor(DType::kF32, {64});
  Tensor* sum = *Add(ctx_, zeros, x);
  {
    PlanEmitter emitter(&plan, 2);
    AddInput(plan, x);
    emitter.AddZeros(0, zeros);
    emitter.Emit(0, sum);
    emitter.Finish();
  }
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(memory_.Place(plan).ok());
    EXPECT_EQ(testing::ReadF32(*zeros), std::vector<float>(64, 0.0f)) << "run " << run;
    EXPECT_FALSE(Overlap(zeros, sum));
    // Dirty it (as another tensor sharing the memory would): the next run sees zeros again.
    const std::vector<float> junk(64, 7.0f);
    ASSERT_TRUE(zeros->buffer->SetTensor(zeros, junk.data(), 0, zeros->NumBytes()).ok());
  }
}

// A tensor the plan adds gets memory where it is first used, apart from everything alive
// there: a gathered copy written by a collective after the step's nodes.
TEST_F(PlanMemoryTest, PlanTensorsGetMemoryWhereFirstUsed) {
  PartitionPlan plan;
  Tensor* x = Input(128);
  Tensor* p = Next(x);
  Tensor* whole = *ctx_.NewTensor(DType::kF32, {256});
  Tensor* y = Next(whole);
  {
    PlanEmitter emitter(&plan, 2);
    AddInput(plan, x);
    emitter.Emit(0, p);
    emitter.AddPrivate(0, whole);
    CommOp gather;
    gather.kind = CommOp::Kind::kAllGather;
    gather.src = {p, nullptr};
    gather.dst = {whole, nullptr};
    emitter.EmitComm(gather);
    emitter.Emit(0, y);
    emitter.Finish();
  }
  ASSERT_TRUE(memory_.Place(plan).ok());
  ASSERT_NE(whole->data, nullptr);
  EXPECT_FALSE(Overlap(whole, p));
  EXPECT_FALSE(Overlap(whole, x));
  EXPECT_FALSE(Overlap(whole, y));
}

TEST_F(PlanMemoryTest, ViewsPointIntoTheirBase) {
  PartitionPlan plan;
  Tensor* x = Input(16);
  Tensor* base = Next(x);
  Tensor* view = *View(ctx_, base, {4}, {}, 8 * sizeof(float));
  Tensor* out = Next(view);
  {
    PlanEmitter emitter(&plan, 2);
    AddInput(plan, x);
    for (Tensor* t : {base, view, out}) emitter.Emit(0, t);
    emitter.Finish();
  }
  ASSERT_TRUE(memory_.Place(plan).ok());
  EXPECT_EQ(view->data, static_cast<uint8_t*>(base->data) + 8 * sizeof(float));
  EXPECT_FALSE(Overlap(out, base));
}

// Plans share each device's memory like graphs share one allocator: a smaller plan fits in
// it, a larger one makes it grow, and a plan whose memory moved is laid out again.
TEST_F(PlanMemoryTest, PlansShareMemoryThatGrowsOnlyWhenNeeded) {
  auto chain = [&](int64_t n, PartitionPlan& plan) {
    Tensor* x = Input(n);
    std::vector<Tensor*> nodes = {Next(x)};
    nodes.push_back(Next(nodes.back()));
    PlanEmitter emitter(&plan, 2);
    AddInput(plan, x);
    for (Tensor* t : nodes) emitter.Emit(0, t);
    emitter.Finish();
    return nodes;
  };
  PartitionPlan big;
  PartitionPlan small;
  PartitionPlan bigger;
  const std::vector<Tensor*> big_nodes = chain(4096, big);
  const std::vector<Tensor*> small_nodes = chain(16, small);
  chain(8192, bigger);
  uint64_t epoch = memory_.epoch();
  ASSERT_TRUE(memory_.Place(big).ok());
  EXPECT_GT(memory_.epoch(), epoch);
  epoch = memory_.epoch();
  const size_t bytes = memory_.bytes(0);
  void* const big_data = big_nodes[1]->data;
  ASSERT_TRUE(memory_.Place(small).ok());
  EXPECT_GT(memory_.epoch(), epoch);
  EXPECT_EQ(memory_.bytes(0), bytes);
  EXPECT_EQ(small_nodes[0]->buffer, big_nodes[0]->buffer);
  ASSERT_TRUE(memory_.Place(big).ok());  // its layout still holds: nothing moves.
  EXPECT_EQ(big_nodes[1]->data, big_data);
  ASSERT_TRUE(memory_.Place(bigger).ok());
  EXPECT_GT(memory_.bytes(0), bytes);
  ASSERT_TRUE(memory_.Place(big).ok());
  EXPECT_EQ(big_nodes[1]->buffer, bigger.steps[0].graphs[0].nodes[0]->buffer);
  EXPECT_EQ(big_nodes[1]->buffer->size(), memory_.bytes(0));
}

// --- Whole graphs on a meta device ---------------------------------------------------------

constexpr int64_t kEmbd = 64;
constexpr int64_t kHidden = 1024;
constexpr int64_t kTokens = 8;

size_t AlignUp(size_t n) {
  return (n + cpu::kCpuAlignment - 1) / cpu::kCpuAlignment * cpu::kCpuAlignment;
}

// y = x + W2 f(W1 x), `layers` times, with W1 cut by rows and W2 by columns (the hidden units
// in `share`): f = SILU keeps the hidden layer cut; f = RMS_NORM needs it whole (gathered).
struct Mlp {
  int layers = 1;
  bool gather = false;

  absl::StatusOr<Tensor*> Build(Context& ctx, Tensor* w1, Tensor* w2, Tensor* x) const {
    Tensor* r = x;
    for (int l = 0; l < layers; ++l) {
      TG_ASSIGN_OR_RETURN(Tensor * h, MulMat(ctx, w1, r));
      TG_ASSIGN_OR_RETURN(h, gather ? RmsNorm(ctx, h, 1e-5f) : Silu(ctx, h));
      TG_ASSIGN_OR_RETURN(Tensor * z, MulMat(ctx, w2, h));
      TG_ASSIGN_OR_RETURN(r, Add(ctx, r, z));
    }
    return r;
  }
};

// One device with the MLP's weights, a compute allocator and a stream.
struct Side {
  absl::Status Init(Device* d) {
    device = d;
    Context& c = weights_ctx;
    TG_ASSIGN_OR_RETURN(w1, c.NewTensor(DType::kF32, {kEmbd, kHidden}));
    TG_ASSIGN_OR_RETURN(w2, c.NewTensor(DType::kF32, {kHidden, kEmbd}));
    w1->SetName("w1");
    w2->SetName("w2");
    BufferType* bt = d->default_buffer_type();
    const size_t w2_at = AlignUp(w1->NumBytes());
    TG_ASSIGN_OR_RETURN(weights, bt->Allocate(w2_at + w2->NumBytes()));
    weights->set_usage(BufferUsage::kWeights);
    TG_RETURN_IF_ERROR(PlaceTensor(weights.get(), w1, 0));
    TG_RETURN_IF_ERROR(PlaceTensor(weights.get(), w2, w2_at));
    for (Tensor* w : {w1, w2}) {
      const std::vector<float> v =
          testing::RandomFloats(w->NumElements(), w == w1 ? 1 : 2, -0.2f, 0.2f);
      TG_RETURN_IF_ERROR(weights->SetTensor(w, v.data(), 0, w->NumBytes()));
    }
    allocator = std::make_unique<GraphAllocator>(bt);
    TG_ASSIGN_OR_RETURN(stream, d->CreateStream());
    return absl::OkStatus();
  }

  // Builds, allocates (with `alloc`, default: this side's) and computes the MLP on x.
  absl::StatusOr<Tensor*> Run(const Mlp& mlp, const std::vector<float>& x,
                              GraphAllocator* alloc = nullptr) {
    ctx = std::make_unique<Context>();
    TG_ASSIGN_OR_RETURN(Tensor * in, ctx->NewTensor(DType::kF32, {kEmbd, kTokens}));
    in->flags |= kFlagInput;
    TG_ASSIGN_OR_RETURN(Tensor * out, mlp.Build(*ctx, w1, w2, in));
    TG_ASSIGN_OR_RETURN(graph, BuildGraph({out}));
    TG_RETURN_IF_ERROR((alloc != nullptr ? alloc : allocator.get())->Allocate(graph));
    TG_RETURN_IF_ERROR(in->buffer->SetTensor(in, x.data(), 0, in->NumBytes()));
    TG_RETURN_IF_ERROR(stream->Compute(graph));
    return out;
  }

  Device* device = nullptr;
  Context weights_ctx;
  Tensor* w1 = nullptr;
  Tensor* w2 = nullptr;
  std::unique_ptr<Buffer> weights;
  std::unique_ptr<GraphAllocator> allocator;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Context> ctx;  // the last graph's.
  Graph graph;
};

std::vector<float> Read(const Tensor& t) {
  std::vector<float> v(t.NumElements());
  EXPECT_TRUE(t.buffer->GetTensor(&t, v.data(), 0, t.NumBytes()).ok());
  return v;
}

// A meta device over counting CPU devices that cuts the hidden layer as `share` says, and a
// plain CPU device computing the same (members destroyed in reverse order: devices last).
struct World {
  explicit World(const std::vector<float>& share) : hidden(ProportionalRanges(kHidden, 1, share)) {
    std::vector<Device*> devices;
    for (size_t i = 0; i < share.size(); ++i) {
      cpus.push_back(std::make_unique<CountingCpuDevice>(absl::StrCat("C", i)));
      devices.push_back(cpus.back().get());
    }
    meta = *MetaDevice::Create(devices, [this](const Tensor& t) -> absl::StatusOr<SplitState> {
      if (t.Name() == "w1") return SplitState::Axis(1, hidden);
      if (t.Name() == "w2") return SplitState::Axis(0, hidden);
      return SplitState::Mirrored();
    });
  }

  std::vector<AxisRange> hidden;
  cpu::CpuDevice ref_device{"REF", "ref", 1};
  std::vector<std::unique_ptr<CountingCpuDevice>> cpus;
  std::unique_ptr<MetaDevice> meta;
  Side ref;
  Side split;
};

class MetaMemoryTest : public ::testing::Test {
 protected:
  void SetUpDevices(const std::vector<float>& share) {
    w_.reset();
    w_ = std::make_unique<World>(share);
    ASSERT_TRUE(w_->split.Init(w_->meta.get()).ok());
    ASSERT_TRUE(w_->ref.Init(&w_->ref_device).ok());
  }

  // Runs `mlp` on both sides; the results must agree.
  void RunBoth(const Mlp& mlp) {
    const std::vector<float> x = testing::RandomFloats(kEmbd * kTokens, 3);
    absl::StatusOr<Tensor*> want = w_->ref.Run(mlp, x);
    absl::StatusOr<Tensor*> got = w_->split.Run(mlp, x);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<float> w = Read(**want);
    const std::vector<float> g = Read(**got);
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], 1e-4f * (1 + std::fabs(w[i]))) << i;
  }

  size_t Held(size_t d) const { return w_->cpus[d]->BytesHeld(BufferUsage::kCompute); }

  std::unique_ptr<World> w_;
};

// Device d's bytes of graph tensor t, from the graph alone: a tensor of hidden units is cut
// like the hidden layer; every other one (the embeddings, the partial sums) is whole.
size_t DeviceBytes(const Tensor& t, const AxisRange& hidden) {
  if (t.ne[0] != kHidden) return t.NumBytes();
  return t.NumBytes() / kHidden * static_cast<size_t>(hidden.end - hidden.begin);
}

TEST_F(MetaMemoryTest, EachDeviceHoldsItsShareOfTheComputeMemory) {
  for (const std::vector<float>& share : std::vector<std::vector<float>>{
           {0.5f, 0.5f}, {0.6f, 0.2f, 0.2f}, {0.25f, 0.25f, 0.25f, 0.25f}}) {
    SCOPED_TRACE(absl::StrCat(share.size(), " devices"));
    SetUpDevices(share);
    RunBoth(Mlp{});
    Side& split = w_->split;
    // The bound: every graph tensor with memory, as much of it as the device holds, none
    // of them ever sharing memory (no reuse at all).
    const Buffer* compute = split.allocator->buffer();
    for (size_t d = 0; d < share.size(); ++d) {
      size_t bound = 0;
      for (const std::vector<Tensor*>* list : {&split.graph.leafs, &split.graph.nodes}) {
        for (const Tensor* t : *list) {
          if (t->buffer == compute && t->view_src == nullptr) {
            bound += AlignUp(DeviceBytes(*t, w_->hidden[d]));
          }
        }
      }
      EXPECT_GT(Held(d), 0u);
      EXPECT_LE(Held(d), bound) << "device " << d;
      // A mirror of the whole compute buffer (the graph's peak) is more than that.
      EXPECT_LT(bound, compute->size()) << "device " << d;
    }
  }
}

// Gathered copies are laid out by liveness too: four layers need no more than one.
TEST_F(MetaMemoryTest, GatheredCopiesAreReusedAcrossLayers) {
  SetUpDevices({0.5f, 0.5f});
  RunBoth(Mlp{1, /*gather=*/true});
  const size_t one = Held(0);
  RunBoth(Mlp{4, /*gather=*/true});
  EXPECT_LT(Held(0), one + kHidden * kTokens * sizeof(float));
  EXPECT_EQ(Held(0), static_cast<MetaStream*>(w_->split.stream.get())->compute_bytes(0));
}

// An output's shadows live in the stream's memory: readable until the stream computes again
// (then a clear error, never another graph's data), and after the stream is gone.
TEST_F(MetaMemoryTest, OutputsHoldUntilTheirStreamComputesAgain) {
  SetUpDevices({0.5f, 0.5f});
  Side& split = w_->split;
  const std::vector<float> x = testing::RandomFloats(kEmbd * kTokens, 4);
  absl::StatusOr<Tensor*> first = split.Run(Mlp{}, x);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<float> first_values = Read(**first);
  std::unique_ptr<Context> first_ctx = std::move(split.ctx);
  GraphAllocator other(w_->meta->default_buffer_type());  // another compute buffer.
  absl::StatusOr<Tensor*> second = split.Run(Mlp{2, false}, x, &other);
  ASSERT_TRUE(second.ok()) << second.status();
  std::vector<float> v(first_values.size());
  absl::Status stale = (*first)->buffer->GetTensor(*first, v.data(), 0, (*first)->NumBytes());
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  const std::vector<float> second_values = Read(**second);
  split.stream.reset();
  EXPECT_EQ(Read(**second), second_values);
}

}  // namespace
}  // namespace tg::meta
