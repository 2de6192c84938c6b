#include "models/llama_tensor_split.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "meta/meta_device.h"

namespace tg {
namespace {

using meta::AxisRange;
using meta::SplitState;

std::vector<AxisRange> Scaled(std::vector<AxisRange> ranges, int64_t factor) {
  for (AxisRange& r : ranges) {
    r.begin *= factor;
    r.end *= factor;
  }
  return ranges;
}

bool Aligned(const std::vector<AxisRange>& ranges, int64_t block) {
  for (const AxisRange& r : ranges) {
    if (r.begin % block != 0 || r.end % block != 0) return false;
  }
  return true;
}

// How far over its share of the heads a device may go for attn_output to be cut without an
// all-gather: on the 15M shape in Q8_0 (6 heads of 48, blocks of 32) over two rpc-servers,
// 4 + 2 heads decoded 1.2-1.5x faster than 3 + 3 with the gather; over in-process CPU
// devices 1-3% slower (docs/meta.md).
constexpr double kMaxHeadShare = 1.5;

// Decides per tensor. The feed-forward unit is fixed by the first ffn_gate's type (weights
// are placed layer by layer, gate before down).
class LlamaSplitPolicy {
 public:
  LlamaSplitPolicy(const LlamaHParams& hp, std::vector<float> proportions, bool expert_split,
                   int64_t attn_output_block)
      : hp_(hp),
        p_(std::move(proportions)),
        expert_split_(expert_split),
        kv_heads_(ChooseKvHeads(hp, p_, attn_output_block)) {}

  absl::StatusOr<SplitState> Split(const Tensor& t) {
    const absl::string_view name = t.Name();
    if (name == "output.weight") return Rows(t);
    if (absl::StartsWith(name, "cache_k_l") || absl::StartsWith(name, "cache_v_l")) {
      return SplitState::Axis(0, Scaled(KvHeads(), hp_.head_dim));
    }
    if (!absl::StartsWith(name, "blk.")) return SplitState::Mirrored();
    const size_t dot = name.find('.', 4);
    if (dot == absl::string_view::npos) return SplitState::Mirrored();
    const absl::string_view leaf = name.substr(dot + 1);
    const int64_t g = hp_.n_head / hp_.n_head_kv;
    if (leaf == "attn_q.weight") return SplitState::Axis(1, QCols(g));
    if (leaf == "attn_q.bias") return SplitState::Axis(0, QCols(g));
    if (leaf == "attn_k.weight" || leaf == "attn_v.weight") {
      return SplitState::Axis(1, Scaled(KvHeads(), hp_.head_dim));
    }
    if (leaf == "attn_k.bias" || leaf == "attn_v.bias") {
      return SplitState::Axis(0, Scaled(KvHeads(), hp_.head_dim));
    }
    if (leaf == "attn_output.weight") return InputColumns(t, QCols(g));
    if (leaf == "attn_sinks.weight") return SplitState::Axis(0, Scaled(KvHeads(), g));
    if (leaf == "ffn_gate.weight" || leaf == "ffn_up.weight") {
      return SplitState::Axis(1, FfnRanges(t.type));
    }
    if (leaf == "ffn_down.weight") return InputColumns(t, FfnRanges(t.type));
    if (absl::EndsWith(leaf, "_exps.weight")) return Experts(t, leaf);
    if (leaf == "ffn_gate_exps.bias" || leaf == "ffn_up_exps.bias") return ExpertWidthBias(t);
    return SplitState::Mirrored();  // the router (ffn_gate_inp) included: every device routes.
  }

 private:
  // Output rows in proportion (no block constraint: quant blocks run along dimension 0).
  SplitState Rows(const Tensor& t) {
    return SplitState::Axis(1, meta::ProportionalRanges(t.ne[1], 1, p_));
  }

  // Whole KV heads per device.
  const std::vector<AxisRange>& KvHeads() const { return kv_heads_; }

  // In units of KV heads whose query columns end on attn_output's quant blocks, so that
  // attn_output is cut where its input arrives (no all-gather), unless that takes a device
  // over kMaxHeadShare times its share of the heads or leaves it none where one-by-one
  // would not; else one by one.
  static std::vector<AxisRange> ChooseKvHeads(const LlamaHParams& hp, absl::Span<const float> p,
                                              int64_t attn_output_block) {
    std::vector<AxisRange> one_by_one = meta::ProportionalRanges(hp.n_head_kv, 1, p);
    if (attn_output_block <= 1 || hp.n_head_kv <= 0) return one_by_one;
    const int64_t cols = hp.n_head / hp.n_head_kv * hp.head_dim;  // a KV head's query columns.
    const int64_t unit = attn_output_block / std::gcd(attn_output_block, cols);
    if (unit == 1) return one_by_one;
    std::vector<AxisRange> aligned = meta::ProportionalRanges(hp.n_head_kv, unit, p);
    double total = 0;
    for (float f : p) total += std::max(0.0f, f);
    for (size_t d = 0; d < p.size(); ++d) {
      const int64_t heads = aligned[d].end - aligned[d].begin;
      const double share = total > 0 ? std::max(0.0f, p[d]) / total * hp.n_head_kv : 0;
      const bool had = one_by_one[d].end > one_by_one[d].begin;
      if ((had && heads == 0) || heads > kMaxHeadShare * share + 1e-9) return one_by_one;
    }
    return aligned;
  }

  // Query columns (n_embd_q) of the heads that go with each device's KV heads.
  std::vector<AxisRange> QCols(int64_t g) { return Scaled(KvHeads(), g * hp_.head_dim); }

  // A weight cut along K to match the columns its input arrives in (`cols`), so that its
  // product is a partial sum; when its quant blocks straddle those cuts it is cut at whole
  // blocks instead and the meta device regathers the input (one all-gather per layer).
  SplitState InputColumns(const Tensor& t, std::vector<AxisRange> cols) {
    const int64_t block = BlockSize(t.type);
    if (Aligned(cols, block)) return SplitState::Axis(0, std::move(cols));
    return SplitState::Axis(0, meta::ProportionalRanges(t.ne[0], block, p_));
  }

  // Expert weights (ffn_{gate,up}_exps [n_embd, F, E], ffn_down_exps [F, n_embd, E]): cut
  // by their width F like the dense feed-forward (one all-reduce after the weighted sum over
  // experts), or with --expert-split by whole experts.
  SplitState Experts(const Tensor& t, absl::string_view leaf) {
    if (expert_split_) return SplitState::Axis(2, meta::ProportionalRanges(t.ne[2], 1, p_));
    if (leaf == "ffn_down_exps.weight") return InputColumns(t, ExpertWidthRanges(t.ne[0], t.type));
    return SplitState::Axis(1, ExpertWidthRanges(t.ne[1], t.type));
  }

  // gpt-oss's gate/up expert biases [F, E]: cut by width as their experts' rows, so that the
  // bias rows (GET_ROWS by the ids) land where the MUL_MAT_ID rows are. Whole on every device
  // (the meta device slices them) with --expert-split, or before an expert weight fixed the unit.
  SplitState ExpertWidthBias(const Tensor& t) {
    MutexLock lock(&mu_);
    if (expert_split_ || !expert_unit_.has_value()) return SplitState::Mirrored();
    return SplitState::Axis(0, meta::ProportionalRanges(t.ne[0], *expert_unit_, p_));
  }

  // The unit is fixed by the first expert weight placed, as the dense one by ffn_gate.
  std::vector<AxisRange> ExpertWidthRanges(int64_t width, DType type) {
    MutexLock lock(&mu_);
    if (!expert_unit_.has_value()) expert_unit_ = BlockSize(type);
    return meta::ProportionalRanges(width, *expert_unit_, p_);
  }

  std::vector<AxisRange> FfnRanges(DType type) {
    MutexLock lock(&mu_);
    if (!ffn_unit_.has_value()) ffn_unit_ = BlockSize(type);
    return meta::ProportionalRanges(hp_.n_ff, *ffn_unit_, p_);
  }

  const LlamaHParams hp_;
  const std::vector<float> p_;
  const bool expert_split_;
  const std::vector<AxisRange> kv_heads_;
  Mutex mu_;
  std::optional<int64_t> ffn_unit_ ABSL_GUARDED_BY(mu_);
  std::optional<int64_t> expert_unit_ ABSL_GUARDED_BY(mu_);
};

// Optional all-reduce tuning from the environment (documented in docs/meta.md).
void ApplyEnvOptions(meta::AllReduceOptions* o) {
  size_t v = 0;
  if (const char* e = std::getenv("TG_ALLREDUCE_BF16_MIN_BYTES"); e && absl::SimpleAtoi(e, &v)) {
    o->bf16_min_bytes = v;
  }
  if (const char* e = std::getenv("TG_ALLREDUCE_RING_MIN_BYTES"); e && absl::SimpleAtoi(e, &v)) {
    o->ring_min_bytes = v;
  }
}

}  // namespace

meta::SplitFn LlamaSplitFn(const LlamaHParams& hp, std::vector<float> proportions,
                           bool expert_split, int64_t attn_output_block) {
  auto policy = std::make_shared<LlamaSplitPolicy>(hp, std::move(proportions), expert_split,
                                                   attn_output_block);
  return [policy](const Tensor& t) { return policy->Split(t); };
}

absl::StatusOr<std::unique_ptr<Device>> CreateTensorSplitDevice(const LlamaHParams& hp,
                                                                const DevicePlan& plan,
                                                                int64_t attn_output_block) {
  const size_t n = plan.devices.size();
  if (n == 0) return absl::InvalidArgumentError("--split-mode tensor: no devices");
  std::vector<float> proportions = plan.proportions;
  if (proportions.empty()) proportions.assign(n, 1.0f / static_cast<float>(n));
  if (proportions.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("--split-mode tensor: ", proportions.size(),
                                                   " proportions for ", n, " devices"));
  }
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--split-mode tensor: ", hp.n_head,
                                                   " heads do not group over ", hp.n_head_kv,
                                                   " KV heads"));
  }
  meta::MetaOptions options;
  ApplyEnvOptions(&options.allreduce);
  TG_ASSIGN_OR_RETURN(
      std::unique_ptr<meta::MetaDevice> device,
      meta::MetaDevice::Create(plan.devices,
                               LlamaSplitFn(hp, proportions, plan.expert_split, attn_output_block),
                               std::move(options)));
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace tg
