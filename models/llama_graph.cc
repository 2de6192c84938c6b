#include "models/llama_graph.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "models/moe_ffn.h"

namespace tg {
namespace {

// Builds the layers on top of the embedded batch; one object per graph.
class GraphBuilder {
 public:
  GraphBuilder(const LlamaModel& model, const KvCache& cache, LlamaGraph* g)
      : m_(model), hp_(model.hparams()), cache_(cache), g_(g), ctx_(g->ctx) {}

  absl::StatusOr<Tensor*> Build(int64_t n_outputs) {
    TG_RETURN_IF_ERROR(MakeInputs(n_outputs));
    TG_ASSIGN_OR_RETURN(Tensor * x, GetRows(ctx_, m_.tok_embd(), g_->tokens));
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      TG_ASSIGN_OR_RETURN(x, Layer(il, x));
    }
    if (g_->out_ids != nullptr) {
      TG_ASSIGN_OR_RETURN(x, GetRows(ctx_, x, g_->out_ids));
    }
    TG_ASSIGN_OR_RETURN(x, Norm(x, m_.output_norm()));
    TG_ASSIGN_OR_RETURN(Tensor * logits, MulMat(ctx_, m_.output(), x));
    logits->SetName("logits");
    return logits;
  }

 private:
  absl::Status MakeInputs(int64_t n_outputs) {
    const int64_t n = g_->n_tokens;
    TG_ASSIGN_OR_RETURN(g_->tokens, Input(DType::kI32, {n}, "inp_tokens"));
    TG_ASSIGN_OR_RETURN(g_->pos, Input(DType::kI32, {n}, "inp_pos"));
    TG_ASSIGN_OR_RETURN(g_->kv_idx, Input(DType::kI32, {n}, "inp_kv_idx"));
    TG_ASSIGN_OR_RETURN(g_->mask, Input(DType::kF32, {g_->n_kv, n}, "inp_mask"));
    if (hp_.n_swa > 0) {
      TG_ASSIGN_OR_RETURN(g_->mask_swa, Input(DType::kF32, {g_->n_kv, n}, "inp_mask_swa"));
    }
    if (n_outputs != n) {
      TG_ASSIGN_OR_RETURN(g_->out_ids, Input(DType::kI32, {n_outputs}, "inp_out_ids"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor*> Input(DType type, std::initializer_list<int64_t> ne, const char* name) {
    TG_ASSIGN_OR_RETURN(Tensor * t, ctx_.NewTensor(type, ne));
    t->SetName(name);
    t->flags |= kFlagInput;
    return t;
  }

  absl::StatusOr<Tensor*> Norm(Tensor* x, Tensor* weight) {
    TG_ASSIGN_OR_RETURN(Tensor * n, RmsNorm(ctx_, x, hp_.rms_eps));
    return Mul(ctx_, n, weight);
  }

  // x @ w (+ bias): [in, T] -> [out, T].
  absl::StatusOr<Tensor*> Linear(Tensor* x, Tensor* w, Tensor* bias) {
    TG_ASSIGN_OR_RETURN(Tensor * y, MulMat(ctx_, w, x));
    if (bias == nullptr) return y;
    return Add(ctx_, y, bias);
  }

  absl::StatusOr<Tensor*> Rotate(Tensor* x) {
    RopeParams rp;
    rp.n_dims = static_cast<int32_t>(hp_.n_rot);
    rp.mode = hp_.rope_neox ? kRopeNeox : kRopeNormal;
    rp.n_ctx_orig = static_cast<int32_t>(hp_.rope_n_ctx_orig);
    rp.freq_base = hp_.rope_freq_base;
    rp.freq_scale = hp_.rope_freq_scale;
    rp.ext_factor = hp_.rope_ext_factor;
    rp.attn_factor = hp_.rope_attn_factor;
    return Rope(ctx_, x, g_->pos, nullptr, rp);
  }

  // Writes the batch's K or V rows into the cache; returns the cache as attention reads it,
  // [head_dim, n_kv, n_head_kv], as a view of the write so that it is ordered after it.
  absl::StatusOr<Tensor*> CacheWriteAndView(Tensor* cache, Tensor* cur) {
    TG_ASSIGN_OR_RETURN(Tensor * rows, Reshape(ctx_, cur, {hp_.n_embd_kv(), g_->n_tokens}));
    TG_ASSIGN_OR_RETURN(Tensor * written, SetRows(ctx_, cache, rows, g_->kv_idx));
    const size_t elem = BlockBytes(cache->type);
    return View(ctx_, written, {hp_.head_dim, g_->n_kv, hp_.n_head_kv},
                {cache->nb[1], static_cast<size_t>(hp_.head_dim) * elem}, 0);
  }

  absl::StatusOr<Tensor*> Attention(int64_t il, Tensor* h) {
    const LlamaLayer& l = m_.layers()[il];
    const int64_t n = g_->n_tokens;
    TG_ASSIGN_OR_RETURN(Tensor * q, Linear(h, l.wq, l.bq));
    TG_ASSIGN_OR_RETURN(Tensor * k, Linear(h, l.wk, l.bk));
    TG_ASSIGN_OR_RETURN(Tensor * v, Linear(h, l.wv, l.bv));
    TG_ASSIGN_OR_RETURN(q, Reshape(ctx_, q, {hp_.head_dim, hp_.n_head, n}));
    TG_ASSIGN_OR_RETURN(k, Reshape(ctx_, k, {hp_.head_dim, hp_.n_head_kv, n}));
    if (l.q_norm != nullptr) {
      TG_ASSIGN_OR_RETURN(q, Norm(q, l.q_norm));
      TG_ASSIGN_OR_RETURN(k, Norm(k, l.k_norm));
    }
    TG_ASSIGN_OR_RETURN(q, Rotate(q));
    TG_ASSIGN_OR_RETURN(k, Rotate(k));
    TG_ASSIGN_OR_RETURN(Tensor * k_all, CacheWriteAndView(cache_.k(il), k));
    TG_ASSIGN_OR_RETURN(Tensor * v_all, CacheWriteAndView(cache_.v(il), v));
    TG_ASSIGN_OR_RETURN(Tensor * qp, Permute(ctx_, q, 0, 2, 1, 3));  // [hd, n, n_head]
    const float scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim));
    Tensor* mask = hp_.is_swa(il) ? g_->mask_swa : g_->mask;
    Tensor* att = nullptr;
    if (l.sinks != nullptr) {
      TG_ASSIGN_OR_RETURN(att, AttentionWithSinks(qp, k_all, v_all, mask, l.sinks, scale));
    } else {
      TG_ASSIGN_OR_RETURN(att, FlashAttn(ctx_, qp, k_all, v_all, mask, scale));
    }
    TG_ASSIGN_OR_RETURN(att, Reshape(ctx_, att, {hp_.n_embd_q(), n}));
    return Linear(att, l.wo, l.bo);
  }

  // Attention whose softmax also holds a per-head sink logit (gpt-oss). FLASH_ATTN has no
  // sinks, but a sink only scales each head's output: with L the sum of exp(s - m) over the
  // keys, softmax with the sink weighs the keys by L / (L + exp(sink - m)), which is the sum
  // of SOFT_MAX(kq * scale + mask, sinks) over the keys. So FLASH_ATTN times that share, rather
  // than V kq unfused (that needs V transposed: a copy of the whole V cache per layer and
  // step). q [hd, n, n_head]; k, v: the cache views [hd, n_kv, n_kv_head]; the result is
  // FLASH_ATTN's [hd, n_head, n].
  absl::StatusOr<Tensor*> AttentionWithSinks(Tensor* q, Tensor* k, Tensor* v, Tensor* mask,
                                             Tensor* sinks, float scale) {
    TG_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx_, k, q));  // [n_kv, n, n_head]
    TG_ASSIGN_OR_RETURN(kq, SoftMax(ctx_, kq, mask, scale, sinks));
    TG_ASSIGN_OR_RETURN(Tensor * share, SumRows(ctx_, kq));  // [1, n, n_head]
    TG_ASSIGN_OR_RETURN(share, Permute(ctx_, share, 0, 2, 1, 3));
    TG_ASSIGN_OR_RETURN(share, Cont(ctx_, share));  // [1, n_head, n]
    TG_ASSIGN_OR_RETURN(Tensor * att, FlashAttn(ctx_, q, k, v, mask, scale));
    return Mul(ctx_, att, share);
  }

  absl::StatusOr<Tensor*> FeedForward(int64_t il, Tensor* h) {
    const LlamaLayer& l = m_.layers()[il];
    if (hp_.moe()) {
      return BuildMoeFfn(
          ctx_, h, l.moe,
          {hp_.n_expert_used, hp_.expert_weights_norm, hp_.expert_weights_scale, hp_.gpt_oss_moe});
    }
    TG_ASSIGN_OR_RETURN(Tensor * gate, MulMat(ctx_, l.ffn_gate, h));
    TG_ASSIGN_OR_RETURN(Tensor * up, MulMat(ctx_, l.ffn_up, h));
    TG_ASSIGN_OR_RETURN(Tensor * act, Swiglu(ctx_, gate, up));
    return MulMat(ctx_, l.ffn_down, act);
  }

  absl::StatusOr<Tensor*> Layer(int64_t il, Tensor* x) {
    const LlamaLayer& l = m_.layers()[il];
    TG_ASSIGN_OR_RETURN(Tensor * h, Norm(x, l.attn_norm));
    TG_ASSIGN_OR_RETURN(Tensor * att, Attention(il, h));
    TG_ASSIGN_OR_RETURN(x, Add(ctx_, x, att));
    TG_ASSIGN_OR_RETURN(h, Norm(x, l.ffn_norm));
    TG_ASSIGN_OR_RETURN(Tensor * ff, FeedForward(il, h));
    return Add(ctx_, x, ff);
  }

  const LlamaModel& m_;
  const LlamaHParams& hp_;
  const KvCache& cache_;
  LlamaGraph* g_;
  Context& ctx_;
};

// SAMPLE of the logits, each output row drawn at its token's position.
absl::StatusOr<Tensor*> SamplePick(LlamaGraph& g, const PickOptions& pick) {
  Tensor* pos = g.pos;
  if (g.logits->ne[1] != g.n_tokens) {  // the last row only.
    TG_ASSIGN_OR_RETURN(pos, View(g.ctx, g.pos, {1}, {}, (g.n_tokens - 1) * sizeof(int32_t)));
  }
  Tensor* window = nullptr;
  if (pick.penalty_window > 0) {
    if (pick.recent == nullptr || pick.recent->NumElements() <= pick.penalty_window) {
      return absl::InvalidArgumentError(absl::StrCat("a penalty window of ", pick.penalty_window,
                                                     " needs a recent-token tensor of at least ",
                                                     pick.penalty_window + 1, " elements"));
    }
    TG_ASSIGN_OR_RETURN(window,
                        View(g.ctx, pick.recent, {pick.penalty_window}, {}, sizeof(int32_t)));
  }
  return Sample(g.ctx, g.logits, pos, window, pick.sample);
}

// Pushes the last row's pick in front of the penalty window (PickOptions::recent): staged
// in element 0, then elements 0..W-1 copied to 1..W through a contiguous copy. Each write
// depends on the one before, and the first on the SAMPLE that reads the window.
absl::StatusOr<Tensor*> PushPick(LlamaGraph& g, const PickOptions& pick) {
  const int64_t w = pick.penalty_window;
  const size_t last = (g.pick->NumElements() - 1) * sizeof(int32_t);
  TG_ASSIGN_OR_RETURN(Tensor * newest, View(g.ctx, g.pick, {1}, {}, last));
  TG_ASSIGN_OR_RETURN(Tensor * slot0, View(g.ctx, pick.recent, {1}, {}, 0));
  TG_ASSIGN_OR_RETURN(Tensor * staged, Cpy(g.ctx, newest, slot0));
  TG_ASSIGN_OR_RETURN(Tensor * front, View(g.ctx, staged, {w}, {}, 0));
  TG_ASSIGN_OR_RETURN(Tensor * shifted, Cont(g.ctx, front));
  TG_ASSIGN_OR_RETURN(Tensor * window, View(g.ctx, pick.recent, {w}, {}, sizeof(int32_t)));
  TG_ASSIGN_OR_RETURN(Tensor * pushed, Cpy(g.ctx, shifted, window));
  pushed->SetName("recent_pushed");
  return pushed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaGraph>> BuildLlamaGraph(const LlamaModel& model,
                                                            const KvCache& cache, int64_t n_tokens,
                                                            int64_t n_past, int64_t n_outputs,
                                                            int64_t kv_pad, GraphOutput output,
                                                            const PickOptions& pick) {
  if (n_tokens <= 0 || n_past < 0 || n_past + n_tokens > cache.n_ctx()) {
    return absl::OutOfRangeError(absl::StrCat("batch of ", n_tokens, " tokens at position ", n_past,
                                              " does not fit the context of ", cache.n_ctx()));
  }
  if (n_outputs != 1 && n_outputs != n_tokens) {
    return absl::InvalidArgumentError("n_outputs must be 1 or the batch size");
  }
  if (kv_pad < 1) return absl::InvalidArgumentError("kv_pad must be positive");
  const LlamaGraphShape shape{.n_tokens = n_tokens,
                              .n_kv = AttendedCells(cache.n_ctx(), n_past, n_tokens, kv_pad),
                              .n_outputs = n_outputs};
  return BuildLlamaGraph(model, cache, shape, output, pick);
}

absl::StatusOr<std::unique_ptr<LlamaGraph>> BuildLlamaGraph(const LlamaModel& model,
                                                            const KvCache& cache,
                                                            const LlamaGraphShape& shape,
                                                            GraphOutput output,
                                                            const PickOptions& pick) {
  const int64_t n_tokens = shape.n_tokens, n_outputs = shape.n_outputs;
  if (n_tokens <= 0 || shape.n_kv <= 0 || shape.n_kv > cache.n_ctx()) {
    return absl::OutOfRangeError(absl::StrCat("batch of ", n_tokens, " tokens attending ",
                                              shape.n_kv, " cells does not fit the context of ",
                                              cache.n_ctx()));
  }
  if (n_outputs < 1 || n_outputs > n_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_outputs ", n_outputs, " outside [1, ", n_tokens, "] (the batch size)"));
  }
  if (Samples(output) && n_outputs != 1 && n_outputs != n_tokens) {
    return absl::InvalidArgumentError("SAMPLE picks one output row or every row of the batch");
  }
  if (FeedsBack(output) && n_tokens != 1) {
    return absl::InvalidArgumentError("a graph that feeds its pick back takes one token");
  }
  auto g = std::make_unique<LlamaGraph>();
  g->n_tokens = n_tokens;
  g->n_kv = shape.n_kv;
  GraphBuilder builder(model, cache, g.get());
  TG_ASSIGN_OR_RETURN(g->logits, builder.Build(n_outputs));
  g->output = output;
  if (output == GraphOutput::kLogits) {
    TG_ASSIGN_OR_RETURN(g->graph, BuildGraph({g->logits}));
    return g;
  }
  std::vector<Tensor*> outputs;
  if (Samples(output)) {
    TG_ASSIGN_OR_RETURN(g->pick, SamplePick(*g, pick));
    if (pick.penalty_window > 0) {
      TG_ASSIGN_OR_RETURN(Tensor * pushed, PushPick(*g, pick));
      outputs.push_back(pushed);
    }
  } else {
    TG_ASSIGN_OR_RETURN(g->pick, Argmax(g->ctx, g->logits));
  }
  g->pick->SetName("pick");
  if (pick.keep_logits) g->logits->flags |= kFlagOutput;
  if (!FeedsBack(output)) {
    outputs.insert(outputs.begin(), g->pick);
    TG_ASSIGN_OR_RETURN(g->graph, BuildGraph(outputs));
    return g;
  }
  // The token input is kept whole through the graph (inputs are never reused), so writing
  // it last cannot disturb the GET_ROWS that read it first.
  TG_ASSIGN_OR_RETURN(Tensor * feed, Cpy(g->ctx, g->pick, g->tokens));
  feed->SetName("next_token");
  outputs.push_back(feed);
  TG_ASSIGN_OR_RETURN(g->graph, BuildGraph(outputs));
  g->pick->flags |= kFlagOutput;  // read back as well.
  return g;
}

}  // namespace tg
