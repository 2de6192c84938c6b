// Test support for the graph-level decisions (graph_capture_test, fusion_test): a llama-like
// decode layer built with core/ops.h, and a fake placement that gives every tensor an address
// in a host arena the way GraphAllocator would (views at their base + offset), so that the
// decisions, which look at addresses and never at contents, run without a device.
// Not thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_GRAPH_TESTING_H_
#define TENSORGRID_BACKENDS_CUDA_GRAPH_TESTING_H_

#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/graph.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace tg::cuda::testing {

// The tensors of one decode layer, for tests that change or inspect them.
struct DecodeLayer {
  Tensor* x = nullptr;  // [n_embd, n_tokens] input.
  Tensor* pos = nullptr;
  Tensor* attn_norm_w = nullptr;
  Tensor* norm = nullptr;    // RMS_NORM
  Tensor* normed = nullptr;  // MUL by attn_norm_w
  Tensor* q_rope = nullptr;
  Tensor* k_rope = nullptr;
  Tensor* gate = nullptr;
  Tensor* up = nullptr;
  Tensor* swiglu = nullptr;
  Tensor* out = nullptr;
};

// x -> norm*w -> q, k (rope) ; ffn gate/up/swiglu/down on the normed x; out = down + q-sum.
// weight_type: the matrices' type (n_embd must be a multiple of its block).
inline DecodeLayer BuildDecodeLayer(Context& ctx, DType weight_type, int64_t n_embd, int64_t n_ff,
                                    int64_t n_tokens, int64_t head_dim) {
  DecodeLayer l;
  const int64_t n_head = n_embd / head_dim;
  l.x = *ctx.NewTensor(DType::kF32, {n_embd, n_tokens});
  l.x->flags |= kFlagInput;
  l.pos = *ctx.NewTensor(DType::kI32, {n_tokens});
  l.pos->flags |= kFlagInput;
  l.attn_norm_w = *ctx.NewTensor(DType::kF32, {n_embd});
  Tensor* wq = *ctx.NewTensor(weight_type, {n_embd, n_embd});
  Tensor* wk = *ctx.NewTensor(weight_type, {n_embd, n_embd});
  Tensor* w_gate = *ctx.NewTensor(weight_type, {n_embd, n_ff});
  Tensor* w_up = *ctx.NewTensor(weight_type, {n_embd, n_ff});
  Tensor* w_down = *ctx.NewTensor(weight_type, {n_ff, n_embd});
  for (Tensor* w : {l.attn_norm_w, wq, wk, w_gate, w_up, w_down}) w->flags |= kFlagWeight;
  l.norm = *RmsNorm(ctx, l.x, 1e-5f);
  l.normed = *Mul(ctx, l.norm, l.attn_norm_w);
  RopeParams rp;
  rp.n_dims = static_cast<int32_t>(head_dim);
  Tensor* q = *Reshape(ctx, *MulMat(ctx, wq, l.normed), {head_dim, n_head, n_tokens});
  l.q_rope = *Rope(ctx, q, l.pos, nullptr, rp);
  Tensor* k = *Reshape(ctx, *MulMat(ctx, wk, l.normed), {head_dim, n_head, n_tokens});
  l.k_rope = *Rope(ctx, k, l.pos, nullptr, rp);
  Tensor* qk = *Add(ctx, l.q_rope, l.k_rope);
  l.gate = *MulMat(ctx, w_gate, l.normed);
  l.up = *MulMat(ctx, w_up, l.normed);
  l.swiglu = *Swiglu(ctx, l.gate, l.up);
  Tensor* down = *MulMat(ctx, w_down, l.swiglu);
  l.out = *Add(ctx, down, *Reshape(ctx, qk, {n_embd, n_tokens}));
  return l;
}

// Gives every tensor of `graph` without memory an address in `arena` (grown as needed), in
// graph order, 256-byte aligned, never reusing memory; views get their base's address plus
// their offset. Returns the bytes used.
inline size_t FakePlace(Graph& graph, std::vector<char>* arena) {
  constexpr size_t kAlign = 256;
  size_t need = 0;
  for (auto* list : {&graph.leafs, &graph.nodes}) {
    for (Tensor* t : *list) {
      if (!t->IsView()) need += (t->NumBytes() + kAlign - 1) / kAlign * kAlign + kAlign;
    }
  }
  arena->assign(need + kAlign, 0);
  char* base = arena->data() + (kAlign - reinterpret_cast<uintptr_t>(arena->data()) % kAlign);
  size_t used = 0;
  for (auto* list : {&graph.leafs, &graph.nodes}) {
    for (Tensor* t : *list) {
      if (t->IsView()) continue;
      t->data = base + used;
      used += (t->NumBytes() + kAlign - 1) / kAlign * kAlign;
    }
  }
  for (Tensor* t : graph.nodes) {
    if (!t->IsView()) continue;
    const Tensor* owner = t;
    size_t offset = 0;
    while (owner->view_src != nullptr) {
      offset += owner->view_offs;
      owner = owner->view_src;
    }
    t->data = static_cast<char*>(owner->data) + offset;
  }
  return used;
}

}  // namespace tg::cuda::testing

#endif  // TENSORGRID_BACKENDS_CUDA_GRAPH_TESTING_H_
