#include "models/llama_graph.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

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
    TG_ASSIGN_OR_RETURN(g_->mask, Input(DType::kF32, {g_->n_kv, n}, "inp_mask"));
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
    rp.n_ctx_orig = static_cast<int32_t>(hp_.n_ctx_train);
    rp.freq_base = hp_.rope_freq_base;
    rp.freq_scale = hp_.rope_freq_scale;
    return Rope(ctx_, x, g_->pos, nullptr, rp);
  }

  // Writes the batch's K or V rows into the cache; returns the cache as attention reads it,
  // [head_dim, n_kv, n_head_kv], as a view of the write so that it is ordered after it.
  absl::StatusOr<Tensor*> CacheWriteAndView(Tensor* cache, Tensor* cur) {
    TG_ASSIGN_OR_RETURN(Tensor * rows, Reshape(ctx_, cur, {hp_.n_embd_kv(), g_->n_tokens}));
    TG_ASSIGN_OR_RETURN(Tensor * written, SetRows(ctx_, cache, rows, g_->pos));
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
    TG_ASSIGN_OR_RETURN(Tensor * att, FlashAttn(ctx_, qp, k_all, v_all, g_->mask, scale));
    TG_ASSIGN_OR_RETURN(att, Reshape(ctx_, att, {hp_.n_embd_q(), n}));
    return Linear(att, l.wo, nullptr);
  }

  absl::StatusOr<Tensor*> FeedForward(int64_t il, Tensor* h) {
    const LlamaLayer& l = m_.layers()[il];
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

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaGraph>> BuildLlamaGraph(const LlamaModel& model,
                                                            const KvCache& cache, int64_t n_tokens,
                                                            int64_t n_past, int64_t n_outputs,
                                                            int64_t kv_pad, GraphOutput output) {
  if (n_tokens <= 0 || n_past < 0 || n_past + n_tokens > cache.n_ctx()) {
    return absl::OutOfRangeError(absl::StrCat("batch of ", n_tokens, " tokens at position ", n_past,
                                              " does not fit the context of ", cache.n_ctx()));
  }
  if (n_outputs != 1 && n_outputs != n_tokens) {
    return absl::InvalidArgumentError("n_outputs must be 1 or the batch size");
  }
  if (output == GraphOutput::kArgmaxFedBack && n_tokens != 1) {
    return absl::InvalidArgumentError("a graph that feeds its pick back takes one token");
  }
  auto g = std::make_unique<LlamaGraph>();
  g->n_tokens = n_tokens;
  g->n_past = n_past;
  if (kv_pad < 1) return absl::InvalidArgumentError("kv_pad must be positive");
  g->n_kv = AttendedCells(cache.n_ctx(), n_past, n_tokens, kv_pad);
  GraphBuilder builder(model, cache, g.get());
  TG_ASSIGN_OR_RETURN(g->logits, builder.Build(n_outputs));
  g->output = output;
  if (output == GraphOutput::kLogits) {
    TG_ASSIGN_OR_RETURN(g->graph, BuildGraph({g->logits}));
    return g;
  }
  TG_ASSIGN_OR_RETURN(g->argmax, Argmax(g->ctx, g->logits));
  g->argmax->SetName("argmax");
  if (output == GraphOutput::kArgmax) {
    TG_ASSIGN_OR_RETURN(g->graph, BuildGraph({g->argmax}));
    return g;
  }
  // The token input is kept whole through the graph (inputs are never reused), so writing
  // it last cannot disturb the GET_ROWS that read it first.
  TG_ASSIGN_OR_RETURN(Tensor * feed, Cpy(g->ctx, g->argmax, g->tokens));
  feed->SetName("next_token");
  TG_ASSIGN_OR_RETURN(g->graph, BuildGraph({feed}));
  g->argmax->flags |= kFlagOutput;  // read back as well.
  return g;
}

}  // namespace tg
