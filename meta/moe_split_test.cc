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
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "meta/moe_testing.h"
#include "reference/reference_ops.h"

namespace tg::meta {
namespace {

// The f64 reference: every node of the graph by reference/ on host memory.
absl::StatusOr<std::vector<float>> ReferenceMoe(const MoeShape& s, MoeData& data) {
  Context ctx;
  std::map<std::string, Tensor*> leafs;
  std::vector<std::vector<uint8_t>> storage;
  for (auto& [name, ne] : MoeWeightShapes(s)) {
    TG_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(MoeWeightType(s, name), ne));
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

// The largest error of got against want, relative to want's largest value.
double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 1e-6;
  double worst = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return got.size() == want.size() ? worst / scale : INFINITY;
}

// Runs both and compares.
void Check(const MoeShape& s, MoeCut cut, const std::vector<float>& share, double tol) {
  SCOPED_TRACE(absl::StrCat(DTypeName(s.type), " F=", s.width, " E=", s.experts, " T=", s.tokens,
                            " on ", share.size(), " devices, ",
                            cut == MoeCut::kWidth ? "width" : "experts", " cut"));
  MoeData data = MakeMoeData(s, 7 + static_cast<uint32_t>(s.width + share.size()));
  absl::StatusOr<std::vector<float>> want = ReferenceMoe(s, data);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<std::unique_ptr<MoeOnMeta>> meta = MoeOnMeta::Create(s, data, cut, share, 1);
  ASSERT_TRUE(meta.ok()) << meta.status();
  std::vector<float> got;
  absl::Status run = (*meta)->Run(&got);
  ASSERT_TRUE(run.ok()) << run;
  const std::vector<CommOp::Kind> comms = (*meta)->Comms();
  EXPECT_LE(RelativeError(got, *want), tol);
  // One all-reduce per MoE feed-forward: after the weighted sum, at the residual.
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0], CommOp::Kind::kAllReduce);
}

std::vector<float> Even(int n) { return std::vector<float>(n, 1.0f / n); }

// Activations are rounded to Q8_0 / Q8_K on the way into a quantized product.
constexpr double kF32Tol = 1e-5;
constexpr double kQuantTol = 3e-2;

MoeShape Quantized(DType type, int64_t embd, int64_t width, int64_t tokens) {
  MoeShape s;
  s.type = type;
  s.embd = embd;
  s.width = width;
  s.tokens = tokens;
  return s;
}

TEST(MetaMoeTest, WidthCutF32OnTwoAndThreeDevices) {
  MoeShape s;
  for (int n : {2, 3}) Check(s, MoeCut::kWidth, Even(n), kF32Tol);
  s.tokens = 1;  // a decode step.
  Check(s, MoeCut::kWidth, Even(2), kF32Tol);
}

// Qwen3-30B-A3B's expert width 768 over 3 devices, in whole Q8_0 blocks.
TEST(MetaMoeTest, WidthCutQ8_0Of768OverThree) {
  Check(Quantized(DType::kQ8_0, 64, 768, 3), MoeCut::kWidth, Even(3), kQuantTol);
}

// -ts 3,1,1 in whole Q4_K blocks of 256: 768 = 512 | nothing | 256 (an empty slice).
TEST(MetaMoeTest, WidthCutQ4_KUnevenWithAnEmptySlice) {
  const MoeShape s = Quantized(DType::kQ4_K, 256, 768, 4);
  Check(s, MoeCut::kWidth, {0.6f, 0.2f, 0.2f}, kQuantTol);
  Check(s, MoeCut::kWidth, {0.75f, 0.25f}, kQuantTol);  // -ts 3,1
}

TEST(MetaMoeTest, ExpertCutF32AndQ8_0) {
  MoeShape s;
  for (int n : {2, 3}) Check(s, MoeCut::kExperts, Even(n), kF32Tol);
  Check(s, MoeCut::kExperts, {0.6f, 0.2f, 0.2f}, kF32Tol);  // experts 2 | 1 | 1
  s.type = DType::kQ8_0;
  s.experts = 8;
  s.used = 3;
  s.tokens = 1;
  Check(s, MoeCut::kExperts, {0.6f, 0.2f, 0.2f}, kQuantTol);
}

// Two experts over three devices: one device holds none and contributes zeros.
TEST(MetaMoeTest, ExpertCutWithADeviceWithoutExperts) {
  MoeShape s;
  s.experts = 2;
  s.used = 1;
  Check(s, MoeCut::kExperts, Even(3), kF32Tol);
}

// Decode steps: each step builds a new graph (new ids tensor) of the same shape, which the
// stream replays; the routing must follow each step's ids, and still one all-reduce.
TEST(MetaMoeTest, ReplayedDecodeStepsFollowEachStepsIds) {
  for (MoeCut cut : {MoeCut::kExperts, MoeCut::kWidth}) {
    MoeShape s;
    s.tokens = 1;
    s.experts = 6;
    MoeData data = MakeMoeData(s, 100);
    absl::StatusOr<std::unique_ptr<MoeOnMeta>> meta =
        MoeOnMeta::Create(s, data, cut, {0.5f, 0.3f, 0.2f}, 1);
    ASSERT_TRUE(meta.ok()) << meta.status();
    for (uint32_t step = 0; step < 3; ++step) {
      const MoeData inputs = MakeMoeData(s, 200 + step);
      data.x = inputs.x;
      data.ids = inputs.ids;
      ASSERT_TRUE((*meta)->NextStep(s, data).ok());
      absl::StatusOr<std::vector<float>> want = ReferenceMoe(s, data);
      ASSERT_TRUE(want.ok()) << want.status();
      std::vector<float> got;
      ASSERT_TRUE((*meta)->Run(&got).ok());
      EXPECT_LE(RelativeError(got, *want), kF32Tol) << "step " << step;
      EXPECT_EQ((*meta)->Comms().size(), 1u);
    }
    EXPECT_EQ((*meta)->replays(), 2);  // the first graph is partitioned, the others replay it.
  }
}

}  // namespace
}  // namespace tg::meta
