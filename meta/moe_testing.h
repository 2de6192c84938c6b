// Test and benchmark helper: one mixture-of-experts feed-forward layer as the moe graph
// builds it (router, softmax, routing weights picked by the ids, up/gate/down through
// MUL_MAT_ID, SWIGLU, the weighted sum over the chosen experts as VIEWs joined by ADD, the
// residual), its weights split by expert width or by whole experts as
// models/llama_tensor_split decides, and MoeOnMeta, which runs it on a meta device over CPU
// devices. Not thread-safe.
#ifndef TENSORGRID_META_MOE_TESTING_H_
#define TENSORGRID_META_MOE_TESTING_H_

#include <algorithm>
#include <functional>
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
#include "meta/meta_device.h"
#include "meta/meta_stream.h"

namespace tg::meta {

struct MoeShape {
  int64_t embd = 64;    // D
  int64_t width = 96;   // F, the expert FFN width
  int64_t experts = 4;  // E
  int64_t used = 2;     // n_used
  int64_t tokens = 5;   // T
  DType type = DType::kF32;
};

enum class MoeCut { kWidth, kExperts };

// The four weights of one MoE layer by name, with their shapes.
inline std::map<std::string, std::vector<int64_t>> MoeWeightShapes(const MoeShape& s) {
  return {{"ffn_gate_inp", {s.embd, s.experts}},
          {"ffn_gate_exps", {s.embd, s.width, s.experts}},
          {"ffn_up_exps", {s.embd, s.width, s.experts}},
          {"ffn_down_exps", {s.width, s.embd, s.experts}}};
}

inline DType MoeWeightType(const MoeShape& s, const std::string& name) {
  return name == "ffn_gate_inp" ? DType::kF32 : s.type;
}

// What models/llama_tensor_split decides for these tensors, spelled out by hand.
inline SplitState MoeStateOf(const std::string& name, const MoeShape& s, MoeCut cut,
                             const std::vector<float>& share) {
  if (MoeWeightShapes(s).count(name) == 0 || name == "ffn_gate_inp") return SplitState::Mirrored();
  if (cut == MoeCut::kExperts) return SplitState::Axis(2, ProportionalRanges(s.experts, 1, share));
  const std::vector<AxisRange> f = ProportionalRanges(s.width, BlockSize(s.type), share);
  return SplitState::Axis(name == "ffn_down_exps" ? 0 : 1, f);
}

// The layer; `get` finds weights and the inputs "x" [D, T] and "ids" [n_used, T] by name.
inline absl::StatusOr<Tensor*> BuildMoe(Context& ctx, const MoeShape& s,
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

// Weights (encoded in their type) and inputs, the same for every device set.
struct MoeData {
  std::map<std::string, std::vector<uint8_t>> weights;
  std::vector<float> x;
  std::vector<int32_t> ids;  // distinct experts per token, as top-k picks them.
};

inline std::vector<float> MoeRandomFloats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

inline MoeData MakeMoeData(const MoeShape& s, uint32_t seed) {
  MoeData d;
  std::mt19937 rng(seed);
  for (const auto& [name, ne] : MoeWeightShapes(s)) {
    int64_t n = 1;
    for (int64_t v : ne) n *= v;
    const std::vector<float> f = MoeRandomFloats(n, rng);
    const DType type = MoeWeightType(s, name);
    std::vector<uint8_t> bytes(RowBytes(type, n));
    QuantizeRow(type, f.data(), bytes.data(), n);
    d.weights[name] = std::move(bytes);
  }
  d.x = MoeRandomFloats(s.embd * s.tokens, rng);
  for (int64_t t = 0; t < s.tokens; ++t) {
    std::vector<int32_t> all(s.experts);
    for (int32_t e = 0; e < s.experts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    d.ids.insert(d.ids.end(), all.begin(), all.begin() + s.used);
  }
  return d;
}

// The layer placed on a meta device over share.size() CPU devices (`threads` each), its
// graph built and allocated once; Run computes it again.
class MoeOnMeta {
 public:
  static absl::StatusOr<std::unique_ptr<MoeOnMeta>> Create(const MoeShape& s, const MoeData& data,
                                                           MoeCut cut, std::vector<float> share,
                                                           int threads) {
    auto m = std::unique_ptr<MoeOnMeta>(new MoeOnMeta());
    TG_RETURN_IF_ERROR(m->Setup(s, data, cut, std::move(share), threads));
    return m;
  }

  // Computes the layer; its output into *out when given.
  absl::Status Run(std::vector<float>* out) {
    TG_RETURN_IF_ERROR(stream_->Compute(graph_));
    if (out == nullptr) return absl::OkStatus();
    out->resize(out_->NumElements());
    return out_->buffer->GetTensor(out_, out->data(), 0, out->size() * sizeof(float));
  }

  // How many times the stream replayed a cached plan for a new graph.
  int64_t replays() const { return static_cast<MetaStream*>(stream_.get())->replays(); }

  // The collectives of the last plan, in order.
  std::vector<CommOp::Kind> Comms() const {
    std::vector<CommOp::Kind> kinds;
    const PartitionPlan* plan = static_cast<MetaStream*>(stream_.get())->last_plan();
    if (plan == nullptr) return kinds;
    for (const PlanStep& step : plan->steps) {
      for (const CommOp& c : step.comms) kinds.push_back(c.kind);
    }
    return kinds;
  }

 private:
  MoeOnMeta() = default;

  absl::Status Setup(const MoeShape& s, const MoeData& data, MoeCut cut, std::vector<float> share,
                     int threads) {
    share_ = std::move(share);
    std::vector<Device*> devices;
    for (size_t i = 0; i < share_.size(); ++i) {
      cpus_.push_back(
          std::make_unique<cpu::CpuDevice>(absl::StrCat("T", i), absl::StrCat(i), threads));
      devices.push_back(cpus_.back().get());
    }
    TG_ASSIGN_OR_RETURN(meta_, MetaDevice::Create(devices, [s, cut, this](const Tensor& t) {
                          return absl::StatusOr<SplitState>(MoeStateOf(t.name, s, cut, share_));
                        }));
    TG_RETURN_IF_ERROR(PlaceWeights(s, data));
    allocator_ = std::make_unique<GraphAllocator>(meta_->default_buffer_type());
    TG_ASSIGN_OR_RETURN(stream_, meta_->CreateStream());
    return NextStep(s, data);
  }

 public:
  // A new graph of the layer (new tensors, as each decode step builds) on inputs `data`;
  // with the same shape the stream replays its plan.
  absl::Status NextStep(const MoeShape& s, const MoeData& data) {
    ctx_ = std::make_unique<Context>();
    std::map<std::string, Tensor*>& leafs = leafs_;
    TG_ASSIGN_OR_RETURN(leafs["x"], ctx_->NewTensor(DType::kF32, {s.embd, s.tokens}));
    TG_ASSIGN_OR_RETURN(leafs["ids"], ctx_->NewTensor(DType::kI32, {s.used, s.tokens}));
    leafs["x"]->flags |= kFlagInput;
    leafs["ids"]->flags |= kFlagInput;
    TG_ASSIGN_OR_RETURN(out_,
                        BuildMoe(*ctx_, s, [&](const std::string& n) { return leafs.at(n); }));
    TG_ASSIGN_OR_RETURN(graph_, BuildGraph({out_}));
    TG_RETURN_IF_ERROR(allocator_->Allocate(graph_));
    TG_RETURN_IF_ERROR(
        leafs["x"]->buffer->SetTensor(leafs["x"], data.x.data(), 0, data.x.size() * sizeof(float)));
    return leafs["ids"]->buffer->SetTensor(leafs["ids"], data.ids.data(), 0,
                                           data.ids.size() * sizeof(int32_t));
  }

 private:
  absl::Status PlaceWeights(const MoeShape& s, const MoeData& data) {
    BufferType* bt = meta_->default_buffer_type();
    std::vector<std::pair<Tensor*, size_t>> placed;
    size_t total = 0;
    for (const auto& [name, ne] : MoeWeightShapes(s)) {
      TG_ASSIGN_OR_RETURN(Tensor * t, weights_ctx_.NewTensor(MoeWeightType(s, name), ne));
      t->SetName(name);
      t->flags |= kFlagWeight;
      total = (total + bt->alignment() - 1) / bt->alignment() * bt->alignment();
      placed.push_back({t, total});
      total += bt->AllocSize(*t);
      leafs_[name] = t;
    }
    TG_ASSIGN_OR_RETURN(weights_, bt->Allocate(total));
    weights_->set_usage(BufferUsage::kWeights);
    for (auto& [t, offset] : placed) {
      TG_RETURN_IF_ERROR(PlaceTensor(weights_.get(), t, offset));
      const std::vector<uint8_t>& bytes = data.weights.at(t->name);
      TG_RETURN_IF_ERROR(weights_->SetTensor(t, bytes.data(), 0, bytes.size()));
    }
    return absl::OkStatus();
  }

  std::vector<float> share_;
  std::vector<std::unique_ptr<cpu::CpuDevice>> cpus_;
  std::unique_ptr<MetaDevice> meta_;
  Context weights_ctx_;
  std::unique_ptr<Buffer> weights_;
  std::unique_ptr<Context> ctx_;
  std::map<std::string, Tensor*> leafs_;
  Tensor* out_ = nullptr;
  Graph graph_;
  std::unique_ptr<GraphAllocator> allocator_;
  std::unique_ptr<Stream> stream_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_MOE_TESTING_H_
