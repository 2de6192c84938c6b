// The mixture-of-experts feed-forward on a meta device, checked against the f64 reference
// ops (reference/), never against the meta device's own kernels: router, softmax, the
// routing weights picked by the ids, up/gate/down through MUL_MAT_ID, SWIGLU, the weighted
// sum over the chosen experts (VIEWs joined by ADD) and the residual. The experts are cut
// by their width F (gate/up rows, down's input columns: partial sums) or by whole experts
// (expert parallelism: partial sums routed by the ids); either way the plan must hold one
// all-reduce, after the weighted sum.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "core/quants.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "meta/meta_device.h"
#include "meta/meta_stream.h"
#include "reference/reference_ops.h"
#include "tests/lib/test_util.h"

namespace tg::meta {
namespace {

struct MoeShape {
  int64_t embd = 64;    // D
  int64_t width = 96;   // F, the expert FFN width
  int64_t experts = 4;  // E
  int64_t used = 2;     // n_used
  int64_t tokens = 5;   // T
  DType type = DType::kF32;
};

enum class Cut { kWidth, kExperts };

// The four weights of one MoE layer by name, with their shapes.
std::map<std::string, std::vector<int64_t>> WeightShapes(const MoeShape& s) {
  return {{"ffn_gate_inp", {s.embd, s.experts}},
          {"ffn_gate_exps", {s.embd, s.width, s.experts}},
          {"ffn_up_exps", {s.embd, s.width, s.experts}},
          {"ffn_down_exps", {s.width, s.embd, s.experts}}};
}

DType WeightType(const MoeShape& s, const std::string& name) {
  return name == "ffn_gate_inp" ? DType::kF32 : s.type;
}

// What models/llama_tensor_split decides for these tensors, spelled out by hand.
SplitState StateOf(const std::string& name, const MoeShape& s, Cut cut,
                   const std::vector<float>& share) {
  if (WeightShapes(s).count(name) == 0 || name == "ffn_gate_inp") return SplitState::Mirrored();
  if (cut == Cut::kExperts) return SplitState::Axis(2, ProportionalRanges(s.experts, 1, share));
  const std::vector<AxisRange> f = ProportionalRanges(s.width, BlockSize(s.type), share);
  return SplitState::Axis(name == "ffn_down_exps" ? 0 : 1, f);
}

// The layer as the moe graph builds it; `get` finds weights and inputs by name.
absl::StatusOr<Tensor*> BuildMoe(Context& ctx, const MoeShape& s,
                                 const std::function<Tensor*(const std::string&)>& get) {
  Tensor* x = get("x");
  Tensor* ids = get("ids");
  TG_ASSIGN_OR_RETURN(Tensor * logits, MulMat(ctx, get("ffn_gate_inp"), x));
  TG_ASSIGN_OR_RETURN(Tensor * probs, SoftMax(ctx, logits, nullptr, 1.0f));
  TG_ASSIGN_OR_RETURN(probs, Reshape(ctx, probs, {1, s.experts, s.tokens}));
  TG_ASSIGN_OR_RETURN(Tensor * weights, GetRows(ctx, probs, ids));  // [1, n_used, T]
  TG_ASSIGN_OR_RETURN(Tensor * x3, Reshape(ctx, x, {s.embd, 1, s.tokens}));
  TG_ASSIGN_OR_RETURN(Tensor * up, MulMatId(ctx, get("ffn_up_exps"), x3, ids));
  TG_ASSIGN_OR_RETURN(Tensor * gate, MulMatId(ctx, get("ffn_gate_exps"), x3, ids));
  TG_ASSIGN_OR_RETURN(Tensor * act, Swiglu(ctx, gate, up));
  TG_ASSIGN_OR_RETURN(Tensor * down, MulMatId(ctx, get("ffn_down_exps"), act, ids));
  TG_ASSIGN_OR_RETURN(down, Mul(ctx, down, weights));
  Tensor* sum = nullptr;
  for (int64_t e = 0; e < s.used; ++e) {
    TG_ASSIGN_OR_RETURN(Tensor * v, View(ctx, down, {s.embd, s.tokens}, {down->nb[2]},
                                         static_cast<size_t>(e) * down->nb[1]));
    if (sum == nullptr) {
      sum = v;
      continue;
    }
    TG_ASSIGN_OR_RETURN(sum, Add(ctx, sum, v));
  }
  return Add(ctx, x, sum);  // the residual: the partial sum must be reduced here, once.
}

// Weight values and inputs, shared by both sides (the weights as encoded in their type).
struct MoeData {
  std::map<std::string, std::vector<uint8_t>> weights;
  std::vector<float> x;
  std::vector<int32_t> ids;
};

MoeData MakeData(const MoeShape& s, uint32_t seed) {
  MoeData d;
  uint32_t k = seed;
  for (const auto& [name, ne] : WeightShapes(s)) {
    int64_t n = 1;
    for (int64_t v : ne) n *= v;
    const std::vector<float> f = testing::RandomFloats(n, ++k);
    const DType type = WeightType(s, name);
    std::vector<uint8_t> bytes(RowBytes(type, n));
    QuantizeRow(type, f.data(), bytes.data(), n);
    d.weights[name] = std::move(bytes);
  }
  d.x = testing::RandomFloats(s.embd * s.tokens, ++k);
  // Distinct experts per token, as top-k picks them.
  std::mt19937 rng(++k);
  for (int64_t t = 0; t < s.tokens; ++t) {
    std::vector<int32_t> all(s.experts);
    for (int32_t e = 0; e < s.experts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    d.ids.insert(d.ids.end(), all.begin(), all.begin() + s.used);
  }
  return d;
}

// The f64 reference: every node of the graph by reference/ on host memory.
absl::StatusOr<std::vector<float>> ReferenceMoe(const MoeShape& s, MoeData& data) {
  Context ctx;
  std::map<std::string, Tensor*> leafs;
  std::vector<std::vector<uint8_t>> storage;
  for (auto& [name, ne] : WeightShapes(s)) {
    TG_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(WeightType(s, name), ne));
    t->data = data.weights[name].data();
    leafs[name] = t;
  }
  TG_ASSIGN_OR_RETURN(leafs["x"], ctx.NewTensor(DType::kF32, {s.embd, s.tokens}));
  leafs["x"]->data = data.x.data();
  TG_ASSIGN_OR_RETURN(leafs["ids"], ctx.NewTensor(DType::kI32, {s.used, s.tokens}));
  leafs["ids"]->data = data.ids.data();
  TG_ASSIGN_OR_RETURN(Tensor * out,
                      BuildMoe(ctx, s, [&](const std::string& n) { return leafs[n]; }));
  TG_ASSIGN_OR_RETURN(Graph graph, BuildGraph({out}));
  for (Tensor* n : graph.nodes) {
    if (n->IsView()) {
      n->data = static_cast<char*>(n->view_src->data) + n->view_offs;
      continue;
    }
    storage.emplace_back(n->NumBytes());
    n->data = storage.back().data();
    TG_RETURN_IF_ERROR(ref::Compute(n));
  }
  const float* f = static_cast<const float*>(out->data);
  return std::vector<float>(f, f + out->NumElements());
}

// The layer on a meta device over n CPU devices; *comms: the plan's collectives.
absl::StatusOr<std::vector<float>> MetaMoe(const MoeShape& s, const MoeData& data, Cut cut,
                                           const std::vector<float>& share,
                                           std::vector<CommOp::Kind>* comms) {
  std::vector<std::unique_ptr<cpu::CpuDevice>> cpus;
  std::vector<Device*> devices;
  for (size_t i = 0; i < share.size(); ++i) {
    cpus.push_back(std::make_unique<cpu::CpuDevice>(absl::StrCat("T", i), absl::StrCat(i), 1));
    devices.push_back(cpus.back().get());
  }
  TG_ASSIGN_OR_RETURN(std::unique_ptr<MetaDevice> meta,
                      MetaDevice::Create(devices, [&](const Tensor& t) {
                        return absl::StatusOr<SplitState>(StateOf(t.name, s, cut, share));
                      }));
  BufferType* bt = meta->default_buffer_type();
  Context wctx;
  std::map<std::string, Tensor*> leafs;
  std::vector<std::pair<Tensor*, size_t>> placed;
  size_t total = 0;
  for (auto& [name, ne] : WeightShapes(s)) {
    TG_ASSIGN_OR_RETURN(Tensor * t, wctx.NewTensor(WeightType(s, name), ne));
    t->SetName(name);
    t->flags |= kFlagWeight;
    total = (total + bt->alignment() - 1) / bt->alignment() * bt->alignment();
    placed.push_back({t, total});
    total += bt->AllocSize(*t);
    leafs[name] = t;
  }
  TG_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> wbuf, bt->Allocate(total));
  wbuf->set_usage(BufferUsage::kWeights);
  for (auto& [t, offset] : placed) {
    TG_RETURN_IF_ERROR(PlaceTensor(wbuf.get(), t, offset));
    const std::vector<uint8_t>& bytes = data.weights.at(t->name);
    TG_RETURN_IF_ERROR(wbuf->SetTensor(t, bytes.data(), 0, bytes.size()));
  }
  Context ctx;
  TG_ASSIGN_OR_RETURN(leafs["x"], ctx.NewTensor(DType::kF32, {s.embd, s.tokens}));
  TG_ASSIGN_OR_RETURN(leafs["ids"], ctx.NewTensor(DType::kI32, {s.used, s.tokens}));
  leafs["x"]->flags |= kFlagInput;
  leafs["ids"]->flags |= kFlagInput;
  TG_ASSIGN_OR_RETURN(Tensor * out,
                      BuildMoe(ctx, s, [&](const std::string& n) { return leafs[n]; }));
  TG_ASSIGN_OR_RETURN(Graph graph, BuildGraph({out}));
  GraphAllocator allocator(bt);
  TG_RETURN_IF_ERROR(allocator.Allocate(graph));
  TG_RETURN_IF_ERROR(
      leafs["x"]->buffer->SetTensor(leafs["x"], data.x.data(), 0, data.x.size() * sizeof(float)));
  TG_RETURN_IF_ERROR(leafs["ids"]->buffer->SetTensor(leafs["ids"], data.ids.data(), 0,
                                                     data.ids.size() * sizeof(int32_t)));
  TG_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, meta->CreateStream());
  TG_RETURN_IF_ERROR(stream->Compute(graph));
  std::vector<float> got(out->NumElements());
  TG_RETURN_IF_ERROR(out->buffer->GetTensor(out, got.data(), 0, got.size() * sizeof(float)));
  const PartitionPlan* plan = static_cast<MetaStream*>(stream.get())->last_plan();
  if (plan == nullptr) return absl::InternalError("no plan");
  for (const PlanStep& step : plan->steps) {
    for (const CommOp& c : step.comms) comms->push_back(c.kind);
  }
  return got;
}

// Runs both and compares: the largest error relative to the largest value.
void Check(const MoeShape& s, Cut cut, const std::vector<float>& share, double tol) {
  SCOPED_TRACE(absl::StrCat(DTypeName(s.type), " F=", s.width, " E=", s.experts, " T=", s.tokens,
                            " on ", share.size(), " devices, ",
                            cut == Cut::kWidth ? "width" : "experts", " cut"));
  MoeData data = MakeData(s, 7 + static_cast<uint32_t>(s.width + share.size()));
  absl::StatusOr<std::vector<float>> want = ReferenceMoe(s, data);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<CommOp::Kind> comms;
  absl::StatusOr<std::vector<float>> got = MetaMoe(s, data, cut, share, &comms);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  double scale = 1e-6;
  for (float v : *want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  double worst = 0;
  for (size_t i = 0; i < want->size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>((*got)[i]) - (*want)[i]));
  }
  EXPECT_LE(worst, tol * scale);
  // One all-reduce per MoE feed-forward: after the weighted sum, at the residual.
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0], CommOp::Kind::kAllReduce);
}

std::vector<float> Even(int n) { return std::vector<float>(n, 1.0f / n); }

// Activations are rounded to Q8_0 / Q8_K on the way into a quantized product.
constexpr double kF32Tol = 1e-5;
constexpr double kQuantTol = 3e-2;

TEST(MetaMoeTest, WidthCutF32OnTwoAndThreeDevices) {
  MoeShape s;
  for (int n : {2, 3}) Check(s, Cut::kWidth, Even(n), kF32Tol);
  s.tokens = 1;  // a decode step.
  Check(s, Cut::kWidth, Even(2), kF32Tol);
}

// Qwen3-30B-A3B's expert width 768 over 3 devices, in whole Q8_0 blocks.
TEST(MetaMoeTest, WidthCutQ8_0Of768OverThree) {
  MoeShape s;
  s.type = DType::kQ8_0;
  s.width = 768;
  s.tokens = 3;
  Check(s, Cut::kWidth, Even(3), kQuantTol);
}

// -ts 3,1,1 in whole Q4_K blocks of 256: 768 = 512 | nothing | 256 (an empty slice).
TEST(MetaMoeTest, WidthCutQ4_KUnevenWithAnEmptySlice) {
  MoeShape s;
  s.type = DType::kQ4_K;
  s.embd = 256;
  s.width = 768;
  s.tokens = 4;
  Check(s, Cut::kWidth, {0.6f, 0.2f, 0.2f}, kQuantTol);
  Check(s, Cut::kWidth, {0.75f, 0.25f}, kQuantTol);  // -ts 3,1
}

TEST(MetaMoeTest, ExpertCutF32AndQ8_0) {
  MoeShape s;
  for (int n : {2, 3}) Check(s, Cut::kExperts, Even(n), kF32Tol);
  Check(s, Cut::kExperts, {0.6f, 0.2f, 0.2f}, kF32Tol);  // experts 2 | 1 | 1
  s.type = DType::kQ8_0;
  s.experts = 8;
  s.used = 3;
  s.tokens = 1;
  Check(s, Cut::kExperts, {0.6f, 0.2f, 0.2f}, kQuantTol);
}

// Two experts over three devices: one device holds none and contributes zeros.
TEST(MetaMoeTest, ExpertCutWithADeviceWithoutExperts) {
  MoeShape s;
  s.experts = 2;
  s.used = 1;
  Check(s, Cut::kExperts, Even(3), kF32Tol);
}

}  // namespace
}  // namespace tg::meta
