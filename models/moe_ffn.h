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
// gpt-oss (MoeFfnOptions::gpt_oss) as llama.cpp's LLM_FFN_SWIGLU_OAI_MOE with
// SOFTMAX_WEIGHT gating: logits = ADD(MUL_MAT(gate_inp, x), gate_inp_b); ids = TOP_K(logits);
// weights = SOFT_MAX over GET_ROWS(logits, ids) (the chosen experts only); each MUL_MAT_ID
// output gains its expert's bias row as ggml_add_id does, here GET_ROWS(bias [F,E], ids
// flattened) reshaped [F,n_used,T] and ADDed (the same f32 additions); act = SWIGLU_OAI.
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
  // gpt-oss only: the router's bias [E] and each expert's bias rows [F, E] / [D, E].
  Tensor* gate_inp_b = nullptr;
  Tensor* gate_exps_b = nullptr;
  Tensor* up_exps_b = nullptr;
  Tensor* down_exps_b = nullptr;
};

struct MoeFfnOptions {
  int64_t n_expert_used = 0;
  bool norm_weights = false;  // divide the chosen experts' weights by their sum.
  float weights_scale = 1.0f;
  bool gpt_oss = false;  // the gating, biases and clamped SwiGLU of gpt-oss (see above).
};

// gpt-oss's SWIGLU_OAI constants (llama.cpp's build_moe_ffn hard-codes them too).
inline constexpr float kGptOssSwigluAlpha = 1.702f;
inline constexpr float kGptOssSwigluLimit = 7.0f;

// x: F32 [D, T], the normed hidden state. Returns F32 [D, T].
absl::StatusOr<Tensor*> BuildMoeFfn(Context& ctx, Tensor* x, const MoeFfnWeights& w,
                                    const MoeFfnOptions& o);

}  // namespace tg

#endif  // TENSORGRID_MODELS_MOE_FFN_H_
