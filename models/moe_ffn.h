// The mixture-of-experts feed-forward of qwen3moe and mixtral as a graph (llama.cpp's
// build_moe_ffn with softmax gating): a router picks n_used of E experts per token, each
// chosen expert runs a SwiGLU FFN through MUL_MAT_ID, and their outputs are summed with the
// router's weights. The node sequence is a contract with the meta backend's MUL_MAT_ID split
// (models/llama_tensor_split.h), which recognises it:
//   logits = MUL_MAT(gate_inp, x) [E,T]; probs = SOFT_MAX; ids = TOP_K(probs) [n_used,T];
//   weights = GET_ROWS(probs viewed [1,E,T], ids) [1,n_used,T] (/ SUM_ROWS when renormalised,
//   * scale when scaled); up, gate = MUL_MAT_ID(.._exps, x viewed [D,1,T], ids) [F,n_used,T];
//   act = SWIGLU(gate, up); down = MUL_MAT_ID(down_exps, act, ids) [D,n_used,T];
//   MUL(down, weights); then the VIEWs [:, e, :] joined by ADD, in expert-slot order -> [D,T].
// Pure graph building; thread-compatible (one Context per caller).
#ifndef TENSORGRID_MODELS_MOE_FFN_H_
#define TENSORGRID_MODELS_MOE_FFN_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/context.h"
#include "core/tensor.h"

namespace tg {

struct MoeFfnWeights {
  Tensor* gate_inp = nullptr;   // router [D, E]
  Tensor* gate_exps = nullptr;  // [D, F, E]
  Tensor* up_exps = nullptr;    // [D, F, E]
  Tensor* down_exps = nullptr;  // [F, D, E]
};

struct MoeFfnOptions {
  int64_t n_expert_used = 0;
  bool norm_weights = false;  // divide the chosen experts' weights by their sum.
  float weights_scale = 1.0f;
};

// x: F32 [D, T], the normed hidden state. Returns F32 [D, T].
absl::StatusOr<Tensor*> BuildMoeFfn(Context& ctx, Tensor* x, const MoeFfnWeights& w,
                                    const MoeFfnOptions& o);

}  // namespace tg

#endif  // TENSORGRID_MODELS_MOE_FFN_H_
