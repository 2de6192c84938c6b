#include "models/moe_ffn.h"

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tg {
namespace {

// The router's weight of each chosen expert: [1, n_used, T].
absl::StatusOr<Tensor*> ExpertWeights(Context& ctx, Tensor* probs, Tensor* ids,
                                      const MoeFfnOptions& o) {
  const int64_t n_expert = probs->ne[0], n_tokens = probs->ne[1], n_used = ids->ne[0];
  TG_ASSIGN_OR_RETURN(Tensor * rows, Reshape(ctx, probs, {1, n_expert, n_tokens}));
  TG_ASSIGN_OR_RETURN(Tensor * weights, GetRows(ctx, rows, ids));
  if (o.norm_weights) {
    // The sum of the top probabilities is at least 1 / n_expert, so unlike llama.cpp no clamp
    // away from 0 is needed (its clamp at 6.1e-5 never binds for E <= 512).
    TG_ASSIGN_OR_RETURN(Tensor * flat, Reshape(ctx, weights, {n_used, n_tokens}));
    TG_ASSIGN_OR_RETURN(Tensor * sum, SumRows(ctx, flat));
    TG_ASSIGN_OR_RETURN(flat, Div(ctx, flat, sum));
    TG_ASSIGN_OR_RETURN(weights, Reshape(ctx, flat, {1, n_used, n_tokens}));
  }
  if (o.weights_scale != 1.0f) {
    TG_ASSIGN_OR_RETURN(weights, Scale(ctx, weights, o.weights_scale));
  }
  return weights;
}

// gpt-oss: the chosen experts' logits softmaxed among themselves: [1, n_used, T].
absl::StatusOr<Tensor*> SoftmaxOfChosen(Context& ctx, Tensor* logits, Tensor* ids) {
  const int64_t n_expert = logits->ne[0], n_tokens = logits->ne[1], n_used = ids->ne[0];
  TG_ASSIGN_OR_RETURN(Tensor * rows, Reshape(ctx, logits, {1, n_expert, n_tokens}));
  TG_ASSIGN_OR_RETURN(Tensor * chosen, GetRows(ctx, rows, ids));
  TG_ASSIGN_OR_RETURN(Tensor * flat, Reshape(ctx, chosen, {n_used, n_tokens}));
  TG_ASSIGN_OR_RETURN(Tensor * probs, SoftMax(ctx, flat, nullptr, 1.0f));
  return Reshape(ctx, probs, {1, n_used, n_tokens});
}

// ggml_add_id: to y [W, n_used, T] the bias row [W] of the expert each slot chose, from
// bias [W, E] (nullptr: y unchanged).
absl::StatusOr<Tensor*> AddExpertBias(Context& ctx, Tensor* y, Tensor* bias, Tensor* ids) {
  if (bias == nullptr) return y;
  TG_ASSIGN_OR_RETURN(Tensor * flat_ids, Reshape(ctx, ids, {ids->ne[0] * ids->ne[1]}));
  TG_ASSIGN_OR_RETURN(Tensor * rows, GetRows(ctx, bias, flat_ids));
  TG_ASSIGN_OR_RETURN(rows, Reshape(ctx, rows, {y->ne[0], y->ne[1], y->ne[2]}));
  return Add(ctx, y, rows);
}

// Sums [D, n_used, T] over the expert slots: VIEWs [:, e, :] joined by ADD in slot order.
absl::StatusOr<Tensor*> SumExperts(Context& ctx, Tensor* experts) {
  const int64_t d = experts->ne[0], n_used = experts->ne[1], n_tokens = experts->ne[2];
  Tensor* sum = nullptr;
  for (int64_t e = 0; e < n_used; ++e) {
    TG_ASSIGN_OR_RETURN(Tensor * slot,
                        View(ctx, experts, {d, n_tokens}, {experts->nb[2]}, e * experts->nb[1]));
    if (sum == nullptr) {
      sum = slot;
    } else {
      TG_ASSIGN_OR_RETURN(sum, Add(ctx, sum, slot));
    }
  }
  if (n_used == 1) return Cont(ctx, sum);  // a strided view is no result to hand on.
  return sum;
}

}  // namespace

absl::StatusOr<Tensor*> BuildMoeFfn(Context& ctx, Tensor* x, const MoeFfnWeights& w,
                                    const MoeFfnOptions& o) {
  const int64_t n_embd = x->ne[0], n_tokens = x->ne[1];
  if (o.n_expert_used < 1 || o.n_expert_used > w.gate_inp->ne[1]) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoE: ", o.n_expert_used, " experts used of ", w.gate_inp->ne[1]));
  }
  TG_ASSIGN_OR_RETURN(Tensor * logits, MulMat(ctx, w.gate_inp, x));
  Tensor* ids = nullptr;
  Tensor* weights = nullptr;
  if (o.gpt_oss) {
    TG_ASSIGN_OR_RETURN(logits, Add(ctx, logits, w.gate_inp_b));
    TG_ASSIGN_OR_RETURN(ids, TopK(ctx, logits, o.n_expert_used));
    TG_ASSIGN_OR_RETURN(weights, SoftmaxOfChosen(ctx, logits, ids));
  } else {
    TG_ASSIGN_OR_RETURN(Tensor * probs, SoftMax(ctx, logits, nullptr, 1.0f));
    TG_ASSIGN_OR_RETURN(ids, TopK(ctx, probs, o.n_expert_used));
    TG_ASSIGN_OR_RETURN(weights, ExpertWeights(ctx, probs, ids, o));
  }
  ids->SetName("ffn_moe_topk");
  TG_ASSIGN_OR_RETURN(Tensor * x3, Reshape(ctx, x, {n_embd, 1, n_tokens}));
  TG_ASSIGN_OR_RETURN(Tensor * up, MulMatId(ctx, w.up_exps, x3, ids));
  TG_ASSIGN_OR_RETURN(up, AddExpertBias(ctx, up, w.up_exps_b, ids));
  TG_ASSIGN_OR_RETURN(Tensor * gate, MulMatId(ctx, w.gate_exps, x3, ids));
  TG_ASSIGN_OR_RETURN(gate, AddExpertBias(ctx, gate, w.gate_exps_b, ids));
  Tensor* act = nullptr;
  if (o.gpt_oss) {
    TG_ASSIGN_OR_RETURN(act, SwigluOai(ctx, gate, up, kGptOssSwigluAlpha, kGptOssSwigluLimit));
  } else {
    TG_ASSIGN_OR_RETURN(act, Swiglu(ctx, gate, up));
  }
  TG_ASSIGN_OR_RETURN(Tensor * down, MulMatId(ctx, w.down_exps, act, ids));
  TG_ASSIGN_OR_RETURN(down, AddExpertBias(ctx, down, w.down_exps_b, ids));
  TG_ASSIGN_OR_RETURN(Tensor * weighted, Mul(ctx, down, weights));
  return SumExperts(ctx, weighted);
}

}  // namespace tg
