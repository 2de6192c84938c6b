// The meta device end to end on small hand-built graphs: every graph is computed on one
// plain CPU device and on a meta device over 2-4 CPU devices with the weights split as the
// test says; the outputs must agree (up to the float reordering of partial sums), and the
// plan must contain the collectives the design predicts.
#include "meta/graph_partition.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "core/quants.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "meta/meta_device.h"
#include "meta/meta_stream.h"
#include "meta/partition_testing.h"
#include "meta/plan_memory.h"
#include "tests/lib/test_util.h"

namespace tg::meta {
namespace {

using Ranges = std::vector<AxisRange>;
using Lookup = std::function<Tensor*(const std::string&)>;
using Builder = std::function<absl::StatusOr<Tensor*>(Context&, const Lookup&)>;

struct Spec {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
  SplitState state;           // on the meta device.
  bool zeros = false;         // weights: start as zeros (a KV cache).
  std::vector<float> values;  // inputs: their data.
};

std::vector<uint8_t> Encode(DType type, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(RowBytes(type, static_cast<int64_t>(values.size())));
  QuantizeRow(type, values.data(), bytes.data(), static_cast<int64_t>(values.size()));
  return bytes;
}

int64_t Elements(const std::vector<int64_t>& ne) {
  int64_t n = 1;
  for (int64_t x : ne) n *= x;
  return n;
}

// One device's copy of a test: its weights (placed once, kept across runs) and a stream.
struct World {
  Device* device = nullptr;
  Context weights_ctx;
  std::map<std::string, Tensor*> weights;
  std::unique_ptr<Buffer> buffer;
  std::unique_ptr<GraphAllocator> allocator;
  std::unique_ptr<Stream> stream;
};

class Harness {
 public:
  Harness(int n, std::vector<Spec> weights) : specs_(std::move(weights)) {
    for (int i = 0; i < n; ++i) {
      cpus_.push_back(std::make_unique<cpu::CpuDevice>(absl::StrCat("T", i), absl::StrCat(i), 1));
    }
    ref_device_ = std::make_unique<cpu::CpuDevice>("REF", "ref", 1);
    std::vector<Device*> devices;
    for (auto& c : cpus_) devices.push_back(c.get());
    meta_ = *MetaDevice::Create(devices, [this](const Tensor& t) -> absl::StatusOr<SplitState> {
      auto it = states_.find(t.name);
      return it == states_.end() ? SplitState::Mirrored() : it->second;
    });
    for (const Spec& s : specs_) states_[s.name] = s.state;
    ref_.device = ref_device_.get();
    split_.device = meta_.get();
  }

  MetaDevice* meta() { return meta_.get(); }
  MetaStream* meta_stream() { return static_cast<MetaStream*>(split_.stream.get()); }

  // Computes `build` on both devices; `inputs` are graph leafs (their state: the split fn).
  void Run(const Builder& build, const std::vector<Spec>& inputs, double tol) {
    for (const Spec& in : inputs) states_[in.name] = in.state;
    std::vector<float> want;
    std::vector<float> got;
    ASSERT_TRUE(RunOn(ref_, build, inputs, &want).ok());
    absl::Status s = RunOn(split_, build, inputs, &got);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(want.size(), got.size());
    double scale = 1e-6;
    for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol * scale) << "element " << i;
    }
  }

  // Builds `build` once in each world and computes that same graph `runs` times, every run
  // with fresh input bytes and, from the second on, after change(run, result) in both
  // worlds; the meta device must match the reference every time.
  void RunSameGraph(const Builder& build, const std::vector<Spec>& inputs, int runs,
                    const std::function<void(int, Tensor*)>& change, double tol) {
    for (const Spec& in : inputs) states_[in.name] = in.state;
    Built ref;
    Built split;
    ASSERT_TRUE(BuildIn(ref_, build, inputs, &ref).ok());
    ASSERT_TRUE(BuildIn(split_, build, inputs, &split).ok());
    for (int run = 0; run < runs; ++run) {
      if (run > 0) {
        change(run, ref.result);
        change(run, split.result);
      }
      std::vector<float> want;
      std::vector<float> got;
      ASSERT_TRUE(ComputeIn(ref_, ref, inputs, run, &want).ok());
      absl::Status s = ComputeIn(split_, split, inputs, run, &got);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], tol) << "run " << run << " element " << i;
      }
    }
  }

  absl::Status RunMeta(const Builder& build, const std::vector<Spec>& inputs,
                       std::vector<float>* out) {
    for (const Spec& in : inputs) states_[in.name] = in.state;
    return RunOn(split_, build, inputs, out);
  }

  // A graph built in one world, kept for RunSameGraph.
  struct Built {
    Context ctx;
    std::map<std::string, Tensor*> leafs;
    Graph graph;
    Tensor* result = nullptr;
  };

  absl::Status BuildIn(World& w, const Builder& build, const std::vector<Spec>& inputs, Built* b) {
    if (w.stream == nullptr) TG_RETURN_IF_ERROR(Setup(w));
    for (const Spec& in : inputs) {
      TG_ASSIGN_OR_RETURN(Tensor * t, b->ctx.NewTensor(in.type, in.ne));
      t->SetName(in.name);
      t->flags |= kFlagInput;
      b->leafs[in.name] = t;
    }
    Lookup get = [&](const std::string& name) -> Tensor* {
      if (auto it = b->leafs.find(name); it != b->leafs.end()) return it->second;
      auto it = w.weights.find(name);
      return it == w.weights.end() ? nullptr : it->second;
    };
    TG_ASSIGN_OR_RETURN(b->result, build(b->ctx, get));
    TG_ASSIGN_OR_RETURN(b->graph, BuildGraph({b->result}));
    return w.allocator->Allocate(b->graph);
  }

  // Writes the inputs (their values shifted by `run` after the first), computes, reads the
  // result.
  absl::Status ComputeIn(World& w, Built& b, const std::vector<Spec>& inputs, int run,
                         std::vector<float>* out) {
    for (const Spec& in : inputs) {
      std::vector<float> values = in.values;
      if (run > 0) {
        for (float& v : values) v += 0.25f * static_cast<float>(run);
      }
      Tensor* t = b.leafs[in.name];
      const std::vector<uint8_t> bytes = Encode(in.type, values);
      TG_RETURN_IF_ERROR(t->buffer->SetTensor(t, bytes.data(), 0, bytes.size()));
    }
    TG_RETURN_IF_ERROR(w.stream->Compute(b.graph));
    if (b.result->type != DType::kF32 || !b.result->IsContiguous()) {
      return absl::InternalError("tests read contiguous f32 results");
    }
    out->resize(b.result->NumElements());
    return b.result->buffer->GetTensor(b.result, out->data(), 0, out->size() * sizeof(float));
  }

  absl::Status RunOn(World& w, const Builder& build, const std::vector<Spec>& inputs,
                     std::vector<float>* out) {
    Built b;
    TG_RETURN_IF_ERROR(BuildIn(w, build, inputs, &b));
    return ComputeIn(w, b, inputs, 0, out);
  }

 private:
  absl::Status Setup(World& w) {
    BufferType* bt = w.device->default_buffer_type();
    std::vector<size_t> offsets;
    size_t total = 0;
    std::vector<Tensor*> order;
    for (const Spec& s : specs_) {
      TG_ASSIGN_OR_RETURN(Tensor * t, w.weights_ctx.NewTensor(s.type, s.ne));
      t->SetName(s.name);
      t->flags |= kFlagWeight;
      w.weights[s.name] = t;
      total = (total + bt->alignment() - 1) / bt->alignment() * bt->alignment();
      offsets.push_back(total);
      total += bt->AllocSize(*t);
      order.push_back(t);
    }
    TG_ASSIGN_OR_RETURN(w.buffer, bt->Allocate(std::max<size_t>(total, 1)));
    w.buffer->set_usage(BufferUsage::kWeights);
    for (size_t i = 0; i < order.size(); ++i) {
      Tensor* t = order[i];
      TG_RETURN_IF_ERROR(PlaceTensor(w.buffer.get(), t, offsets[i]));
      std::vector<float> values(Elements(specs_[i].ne), 0.0f);
      if (!specs_[i].zeros) {
        values = testing::RandomFloats(values.size(), absl::Hash<std::string>()(specs_[i].name));
      }
      const std::vector<uint8_t> bytes = Encode(t->type, values);
      TG_RETURN_IF_ERROR(w.buffer->SetTensor(t, bytes.data(), 0, bytes.size()));
    }
    w.allocator = std::make_unique<GraphAllocator>(bt);
    TG_ASSIGN_OR_RETURN(w.stream, w.device->CreateStream());
    return absl::OkStatus();
  }

  std::vector<Spec> specs_;
  std::map<std::string, SplitState> states_;
  std::vector<std::unique_ptr<cpu::CpuDevice>> cpus_;
  std::unique_ptr<cpu::CpuDevice> ref_device_;
  std::unique_ptr<MetaDevice> meta_;
  World ref_;
  World split_;
};

Ranges R(std::initializer_list<std::pair<int64_t, int64_t>> r) {
  Ranges out;
  for (auto [b, e] : r) out.push_back({b, e});
  return out;
}

Spec Input(const std::string& name, DType type, std::vector<int64_t> ne, uint32_t seed,
           SplitState state = SplitState::Mirrored()) {
  std::vector<float> v = testing::RandomFloats(Elements(ne), seed);
  return {name, type, std::move(ne), std::move(state), false, std::move(v)};
}

// y = W2 (W1 x) + x: W1 cut by rows gives a cut activation, W2 cut by columns takes it and
// gives partial sums, and the residual add all-reduces them: exactly one collective.
TEST(MetaPartitionTest, RowsThenColumnsNeedOneAllReduce) {
  for (int n : {2, 3, 4}) {
    const Ranges hidden = ProportionalRanges(96, 1, std::vector<float>(n, 1.0f / n));
    Harness h(n, {{"w1", DType::kF32, {64, 96}, SplitState::Axis(1, hidden)},
                  {"w2", DType::kF32, {96, 64}, SplitState::Axis(0, hidden)}});
    Builder build = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
      TG_ASSIGN_OR_RETURN(Tensor * y, MulMat(ctx, get("w1"), get("x")));
      TG_ASSIGN_OR_RETURN(Tensor * z, MulMat(ctx, get("w2"), y));
      return Add(ctx, get("x"), z);
    };
    h.Run(build, {Input("x", DType::kF32, {64, 5}, 1)}, 1e-5);
    ASSERT_NE(h.meta_stream()->last_plan(), nullptr);
    EXPECT_EQ(h.meta_stream()->last_plan()->comm_count, 1) << n << " devices";
  }
}

// Uneven cuts, a device with nothing, and Q8_0 weights cut along K at whole blocks.
TEST(MetaPartitionTest, UnevenEmptyAndQuantizedSlices) {
  const Ranges rows = R({{0, 40}, {40, 40}, {40, 96}});
  const Ranges blocks = R({{0, 32}, {32, 32}, {32, 96}});
  Harness h(3, {{"w1", DType::kF32, {64, 96}, SplitState::Axis(1, rows)},
                {"w2", DType::kQ8_0, {96, 64}, SplitState::Axis(0, blocks)},
                {"w3", DType::kQ8_0, {64, 48}, SplitState::Axis(1, R({{0, 8}, {8, 8}, {8, 48}}))}});
  Builder build = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    TG_ASSIGN_OR_RETURN(Tensor * y, MulMat(ctx, get("w1"), get("x")));
    TG_ASSIGN_OR_RETURN(y, Silu(ctx, y));
    TG_ASSIGN_OR_RETURN(Tensor * z, MulMat(ctx, get("w2"), y));
    TG_ASSIGN_OR_RETURN(z, Add(ctx, get("x"), z));
    return MulMat(ctx, get("w3"), z);  // cut output rows, gathered when read.
  };
  h.Run(build, {Input("x", DType::kF32, {64, 3}, 2)}, 2e-2);  // activations rounded to Q8_0.
}

// Ops that need whole rows gather them; inputs may arrive split; a partial output is summed
// when read.
TEST(MetaPartitionTest, GathersAndPartialOutputs) {
  Harness h(2, {{"w", DType::kF32, {32, 16}, SplitState::Axis(0, R({{0, 8}, {8, 32}}))},
                {"table", DType::kF32, {16, 10}, SplitState::Axis(1, R({{0, 3}, {3, 10}}))}});
  const SplitState by_k = SplitState::Axis(0, R({{0, 8}, {8, 32}}));
  Builder norm = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    TG_ASSIGN_OR_RETURN(Tensor * n, RmsNorm(ctx, get("a"), 1e-5f));  // a is cut along rows.
    TG_ASSIGN_OR_RETURN(Tensor * s, SoftMax(ctx, n, nullptr, 0.5f));
    return Scale(ctx, s, 3.0f);
  };
  h.Run(norm, {Input("a", DType::kF32, {32, 4}, 3, by_k)}, 1e-5);
  EXPECT_EQ(h.meta_stream()->last_plan()->comm_count, 1);
  Builder partial = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    return MulMat(ctx, get("w"), get("a"));  // PARTIAL: GetTensor sums it.
  };
  h.Run(partial, {Input("a", DType::kF32, {32, 4}, 4, by_k)}, 1e-5);
  EXPECT_EQ(h.meta_stream()->last_plan()->comm_count, 0);
  Builder rows = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    return GetRows(ctx, get("table"), get("ids"));  // the table is cut by rows: gathered.
  };
  Spec ids{"ids", DType::kI32, {4}, SplitState::Mirrored(), false, {9, 0, 3, 2}};
  h.Run(rows, {ids}, 0);
  Builder odd_view = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    Tensor* a = get("a");
    TG_ASSIGN_OR_RETURN(Tensor * v, View(ctx, a, {6, 3}, {a->nb[1]}, 5 * sizeof(float)));
    return Cont(ctx, v);  // a view straddling the cut at 8 with a stride that does not map.
  };
  h.Run(odd_view, {Input("a", DType::kF32, {32, 4}, 5, by_k)}, 0);
}

// One llama-style attention block with a KV cache cut by KV head, run for three decode
// steps (the plan is replayed for the growing cache), on 2 and 3 devices (one without heads).
void AttentionSteps(int n, const std::vector<float>& share) {
  constexpr int64_t kEmbd = 32;
  constexpr int64_t kHd = 8;
  constexpr int64_t kHeads = 4;
  constexpr int64_t kKvHeads = 2;
  constexpr int64_t kCtx = 16;
  const Ranges kv = ProportionalRanges(kKvHeads, 1, share);
  auto scaled = [&](int64_t f) {
    Ranges r = kv;
    for (AxisRange& x : r) x = {x.begin * f, x.end * f};
    return r;
  };
  const int64_t g = kHeads / kKvHeads;
  Harness h(n,
            {{"wq", DType::kF32, {kEmbd, kHeads * kHd}, SplitState::Axis(1, scaled(g * kHd))},
             {"wk", DType::kF32, {kEmbd, kKvHeads * kHd}, SplitState::Axis(1, scaled(kHd))},
             {"wv", DType::kF32, {kEmbd, kKvHeads * kHd}, SplitState::Axis(1, scaled(kHd))},
             {"wo", DType::kF32, {kHeads * kHd, kEmbd}, SplitState::Axis(0, scaled(g * kHd))},
             {"norm", DType::kF32, {kEmbd}, SplitState::Mirrored()},
             {"ck", DType::kF32, {kKvHeads * kHd, kCtx}, SplitState::Axis(0, scaled(kHd)), true},
             {"cv", DType::kF32, {kKvHeads * kHd, kCtx}, SplitState::Axis(0, scaled(kHd)), true}});
  for (int64_t past : {0, 3, 4}) {
    const int64_t t = past == 0 ? 3 : 1;
    const int64_t n_kv = past + t;
    Builder build = [&](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
      Tensor* x = get("x");
      TG_ASSIGN_OR_RETURN(Tensor * hn, RmsNorm(ctx, x, 1e-5f));
      TG_ASSIGN_OR_RETURN(hn, Mul(ctx, hn, get("norm")));
      TG_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, get("wq"), hn));
      TG_ASSIGN_OR_RETURN(Tensor * k, MulMat(ctx, get("wk"), hn));
      TG_ASSIGN_OR_RETURN(Tensor * v, MulMat(ctx, get("wv"), hn));
      TG_ASSIGN_OR_RETURN(q, Reshape(ctx, q, {kHd, kHeads, t}));
      TG_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {kHd, kKvHeads, t}));
      RopeParams rp;
      rp.n_dims = kHd;
      TG_ASSIGN_OR_RETURN(q, Rope(ctx, q, get("pos"), nullptr, rp));
      TG_ASSIGN_OR_RETURN(k, Rope(ctx, k, get("pos"), nullptr, rp));
      Tensor* kv_all[2];
      Tensor* cur[2] = {k, v};
      const char* caches[2] = {"ck", "cv"};
      for (int i = 0; i < 2; ++i) {
        Tensor* cache = get(caches[i]);
        TG_ASSIGN_OR_RETURN(Tensor * rows, Reshape(ctx, cur[i], {kKvHeads * kHd, t}));
        TG_ASSIGN_OR_RETURN(Tensor * w, SetRows(ctx, cache, rows, get("pos")));
        TG_ASSIGN_OR_RETURN(
            kv_all[i], View(ctx, w, {kHd, n_kv, kKvHeads}, {cache->nb[1], kHd * sizeof(float)}, 0));
      }
      TG_ASSIGN_OR_RETURN(Tensor * qp, Permute(ctx, q, 0, 2, 1, 3));
      TG_ASSIGN_OR_RETURN(Tensor * att,
                          FlashAttn(ctx, qp, kv_all[0], kv_all[1], get("mask"), 0.35f));
      TG_ASSIGN_OR_RETURN(att, Reshape(ctx, att, {kHeads * kHd, t}));
      TG_ASSIGN_OR_RETURN(Tensor * o, MulMat(ctx, get("wo"), att));
      return Add(ctx, x, o);
    };
    std::vector<float> pos;
    std::vector<float> mask(n_kv * t, -INFINITY);
    for (int64_t i = 0; i < t; ++i) {
      pos.push_back(static_cast<float>(past + i));
      for (int64_t j = 0; j <= past + i; ++j) mask[i * n_kv + j] = 0.0f;
    }
    h.Run(build,
          {Input("x", DType::kF32, {kEmbd, t}, 10 + static_cast<uint32_t>(past)),
           {"pos", DType::kI32, {t}, SplitState::Mirrored(), false, pos},
           {"mask", DType::kF32, {n_kv, t}, SplitState::Mirrored(), false, mask}},
          1e-5);
    EXPECT_EQ(h.meta_stream()->last_plan()->comm_count, 1) << "past " << past;
  }
  // The prompt's plan was built once and replayed for both decode steps.
  EXPECT_EQ(h.meta_stream()->partitions(), 1);
  EXPECT_EQ(h.meta_stream()->replays(), 2);
}

TEST(MetaPartitionTest, AttentionByKvHeadOverDecodeSteps) { AttentionSteps(2, {0.5f, 0.5f}); }

TEST(MetaPartitionTest, AttentionWithADeviceWithoutHeads) { AttentionSteps(3, {0.5f, 0.0f, 0.5f}); }

// The same graph computed again unchanged (a decode step's graph, reused while its KV block
// lasts) runs its plan without a replay; a parameter changed in place, or a shape, is seen,
// and the plan replayed (or rebuilt) for it.
TEST(MetaPartitionTest, AnUnchangedGraphRunsItsPlanAgain) {
  const std::vector<Spec> weights = {
      {"w1", DType::kF32, {16, 24}, SplitState::Axis(1, R({{0, 8}, {8, 24}}))},
      {"w2", DType::kF32, {24, 16}, SplitState::Axis(0, R({{0, 8}, {8, 24}}))}};
  Harness h(2, weights);
  Builder build = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    TG_ASSIGN_OR_RETURN(Tensor * a, MulMat(ctx, get("w1"), get("x")));
    TG_ASSIGN_OR_RETURN(Tensor * b, MulMat(ctx, get("w2"), a));
    return Scale(ctx, b, 0.5f);
  };
  // Runs 1 and 2 as built; run 3 scales by 2 instead (one op parameter of one node).
  h.RunSameGraph(
      build, {Input("x", DType::kF32, {16, 2}, 21)}, 4,
      [](int run, Tensor* result) {
        if (run == 3) result->SetParamF32(0, 2.0f);
      },
      1e-4);
  EXPECT_EQ(h.meta_stream()->partitions(), 1);
  EXPECT_EQ(h.meta_stream()->reruns(), 2);   // runs 1 and 2.
  EXPECT_EQ(h.meta_stream()->replays(), 1);  // run 3.
}

// A meta device's plans do not depend on what other meta devices do: another device loading
// weights leaves this one's cached plan valid (its resident generation is its own).
TEST(MetaPartitionTest, AnotherDevicesWeightsKeepThePlan) {
  const Ranges rows = R({{0, 6}, {6, 16}});
  const std::vector<Spec> weights = {{"w", DType::kF32, {16, 16}, SplitState::Axis(1, rows)}};
  Harness mine(2, weights);
  Harness other(2, weights);
  Builder build = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    TG_ASSIGN_OR_RETURN(Tensor * y, MulMat(ctx, get("w"), get("x")));
    return Scale(ctx, y, 0.5f);
  };
  mine.Run(build, {Input("x", DType::kF32, {16, 2}, 8)}, 1e-6);
  other.Run(build, {Input("x", DType::kF32, {16, 2}, 9)}, 1e-6);  // places its weights.
  mine.Run(build, {Input("x", DType::kF32, {16, 2}, 10)}, 1e-6);
  EXPECT_EQ(mine.meta_stream()->partitions(), 1);
  EXPECT_EQ(mine.meta_stream()->replays(), 1);
}

// A fused weight (q|k|v style) cut in segments: each device holds a piece of every segment.
TEST(MetaPartitionTest, SegmentedWeightScattersAndGathers) {
  const SplitState seg = SplitState::Segmented(1, {{{0, 4}, {8, 12}}, {{4, 8}, {12, 16}}});
  Harness h(2, {{"w", DType::kF32, {16, 16}, seg}});
  Builder build = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    TG_ASSIGN_OR_RETURN(Tensor * y, MulMat(ctx, get("w"), get("x")));
    return Scale(ctx, y, 0.5f);
  };
  h.Run(build, {Input("x", DType::kF32, {16, 2}, 6)}, 1e-6);
}

TEST(MetaPartitionTest, BadSplitsAreClearErrors) {
  cpu::CpuDevice a("A", "a", 1);
  cpu::CpuDevice b("B", "b", 1);
  std::unique_ptr<MetaDevice> meta =
      *MetaDevice::Create({&a, &b}, [](const Tensor& t) -> absl::StatusOr<SplitState> {
        return SplitState::Axis(1, R({{0, 3}, {4, 8}}));
      });
  Context ctx;
  Tensor* w = *ctx.NewTensor(DType::kF32, {4, 8});
  w->SetName("w");
  std::unique_ptr<Buffer> buf = *meta->default_buffer_type()->Allocate(1024);
  buf->set_usage(BufferUsage::kWeights);
  absl::Status s = PlaceTensor(buf.get(), w, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s;
  EXPECT_FALSE(MetaDevice::Create({&a, &a}, nullptr).ok());
  EXPECT_FALSE(MetaDevice::Create({}, nullptr).ok());
}

TEST(MetaPartitionTest, WritingRowsOfARowSplitTensorIsRefused) {
  Harness h(2, {{"cache", DType::kF32, {8, 6}, SplitState::Axis(1, R({{0, 3}, {3, 6}})), true}});
  Builder build = [](Context& ctx, const Lookup& get) -> absl::StatusOr<Tensor*> {
    return SetRows(ctx, get("cache"), get("rows"), get("ids"));
  };
  std::vector<float> out;
  Spec rows = Input("rows", DType::kF32, {8, 2}, 7);
  Spec ids{"ids", DType::kI32, {2}, SplitState::Mirrored(), false, {1, 4}};
  absl::Status s = h.RunMeta(build, {rows, ids}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("SET_ROWS"), std::string::npos) << s;
  EXPECT_NE(s.message().find("dimension 1 cannot be cut"), std::string::npos) << s;
}

// The partition entry points need nothing of a meta device but its ShadowLookup: here a fake
// one says which leaf is resident (and with which shadows), everything else is a graph tensor.
class PartitionGraphTest : public ::testing::Test {
 protected:
  PartitionGraphTest() : a_("A", "a", 1), b_("B", "b", 1), lookup_({&a_, &b_}) {
    w_ = *ctx_.NewTensor(DType::kF32, {8, 6});
    w_->SetName("w");
    const SplitState rows = SplitState::Axis(1, R({{0, 2}, {2, 6}}));
    lookup_.SetResident(w_, ShadowSet{rows,
                                      {*ctx_.NewTensor(DType::kF32, {8, 2}),
                                       *ctx_.NewTensor(DType::kF32, {8, 4})}});
    x_ = *ctx_.NewTensor(DType::kF32, {8, 3});
    y_ = *MulMat(ctx_, w_, x_);
    graph_ = *BuildGraph({y_});
  }

  size_t LeafIndex(const Tensor* t) const {
    return std::find(graph_.leafs.begin(), graph_.leafs.end(), t) - graph_.leafs.begin();
  }

  cpu::CpuDevice a_;
  cpu::CpuDevice b_;
  FakeShadowLookup lookup_;
  Context ctx_;
  Tensor* w_;
  Tensor* x_;
  Tensor* y_;
  Graph graph_;
};

TEST_F(PartitionGraphTest, RecordsWhatTheStreamNeeds) {
  absl::StatusOr<std::shared_ptr<PartitionPlan>> plan = PartitionGraph(lookup_, graph_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const PartitionPlan& p = **plan;
  ASSERT_EQ(p.inputs.size(), 1u);  // x, scattered before each Compute.
  EXPECT_TRUE(p.inputs[0].slot.leaf);
  EXPECT_EQ(p.inputs[0].slot.index, LeafIndex(x_));
  ASSERT_EQ(p.results.size(), 2u);  // x and the output y, registered for GetTensor.
  EXPECT_FALSE(p.results[1].slot.leaf);
  EXPECT_EQ(p.results[1].set.state, SplitState::Axis(0, R({{0, 2}, {2, 6}})));
  // x and y have memory of their own on each device (their shadows are the plan's).
  PlanMemory memory({a_.default_buffer_type(), b_.default_buffer_type()});
  ASSERT_TRUE(memory.Place(**plan).ok());
  for (int d = 0; d < 2; ++d) {
    const Tensor* xs = p.inputs[0].set.shadows[d];
    const Tensor* ys = p.results[1].set.shadows[d];
    ASSERT_NE(xs->data, nullptr);
    ASSERT_NE(ys->data, nullptr);
    EXPECT_EQ(xs->buffer, ys->buffer);
    EXPECT_EQ(xs->buffer->type()->device(), d == 0 ? &a_ : &b_);
  }
  EXPECT_EQ(p.bindings[LeafIndex(w_)], w_);
  EXPECT_EQ(p.bindings[LeafIndex(x_)], nullptr);
  EXPECT_EQ(p.comm_count, 0);
  EXPECT_FALSE(p.writes_graph_tensors);
}

TEST_F(PartitionGraphTest, ReplaysOnlyUnderTheSameResidentGeneration) {
  std::shared_ptr<PartitionPlan> plan = *PartitionGraph(lookup_, graph_);
  const size_t tape = plan->tape.size();
  EXPECT_TRUE(BindingsMatch(lookup_, *plan, graph_));
  EXPECT_TRUE(ReplayPartition(lookup_, graph_, plan.get()));
  EXPECT_EQ(plan->tape.size(), tape);
  // Another resident tensor placed: the plan's bindings by address may be stale.
  Tensor* other = *ctx_.NewTensor(DType::kF32, {4});
  lookup_.SetResident(other, ShadowSet{SplitState::Mirrored(), {other, other}});
  EXPECT_FALSE(BindingsMatch(lookup_, *plan, graph_));
  EXPECT_FALSE(ReplayPartition(lookup_, graph_, plan.get()));
}

TEST_F(PartitionGraphTest, ALeafOutsideTheDevicesMemoryIsAnError) {
  lookup_.SetHome(x_, ShadowLookup::Home::kElsewhere);
  absl::StatusOr<std::shared_ptr<PartitionPlan>> plan = PartitionGraph(lookup_, graph_);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("not in the memory of FAKE"), std::string::npos)
      << plan.status();
}

}  // namespace
}  // namespace tg::meta
