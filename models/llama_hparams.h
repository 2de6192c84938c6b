// Hyperparameters of a llama-family model (llama, mistral, qwen2, qwen3, and the
// mixture-of-experts qwen3moe, llama/mixtral with expert_count > 0 and gpt-oss) read from GGUF
// metadata, with every value checked for sanity before any memory is sized from it.
#ifndef TENSORGRID_MODELS_LLAMA_HPARAMS_H_
#define TENSORGRID_MODELS_LLAMA_HPARAMS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "gguf/gguf_file.h"

namespace tg {

enum class LlamaArch { kLlama, kMistral, kQwen2, kQwen3, kQwen3Moe, kGptOss };

struct LlamaHParams {
  LlamaArch arch = LlamaArch::kLlama;
  std::string arch_name;  // general.architecture as in the file.
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // {arch}.attention.key_length, else n_embd / n_head.
  int64_t n_rot = 0;     // rotated dims per head.
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / {arch}.rope.scaling.factor for linear and YaRN scaling.
  // YaRN (rope.scaling.type "yarn"), as llama.cpp sets it up: ext_factor 1, the attention
  // factor that cancels ROPE's own magnitude correction, and the original context.
  float rope_ext_factor = 0.0f;
  float rope_attn_factor = 1.0f;
  int64_t rope_n_ctx_orig = 0;   // {arch}.rope.scaling.original_context_length, else n_ctx_train.
  bool rope_neox = false;        // qwen2/qwen3 rotate (i, i + n_rot/2) pairs.
  bool has_qkv_bias = false;     // qwen2.
  bool has_qk_norm = false;      // qwen3, qwen3moe.
  // gpt-oss: a bias on the attention output, per-head attention sinks, even layers attending a
  // sliding window of n_swa positions (llama.cpp's pattern 2: layer il slides when il % 2 == 0),
  // the router's biased logits softmaxed over the chosen experts only, experts with biases
  // and the clamped SwiGLU (SWIGLU_OAI).
  bool has_o_bias = false;
  bool has_sinks = false;
  int64_t n_swa = 0;  // 0: every layer attends the whole context.
  bool gpt_oss_moe = false;
  // Mixture of experts (n_expert > 0): every layer's feed-forward is n_expert experts of
  // width n_ff_exp, n_expert_used of them chosen per token by the router (models/moe_ffn.h).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  bool expert_weights_norm = false;   // the chosen experts' weights renormalised to sum 1.
  float expert_weights_scale = 1.0f;  // {arch}.expert_weights_scale; 0 in a file means 1.

  bool moe() const { return n_expert > 0; }
  bool is_swa(int64_t il) const { return n_swa > 0 && il % 2 == 0; }

  int64_t n_embd_q() const { return head_dim * n_head; }
  int64_t n_embd_kv() const { return head_dim * n_head_kv; }
};

// INVALID_ARGUMENT naming the key for a missing, mistyped or absurd value;
// UNIMPLEMENTED for an architecture tensorgrid does not run.
absl::StatusOr<LlamaHParams> ReadLlamaHParams(const GgufFile& file);

}  // namespace tg

#endif  // TENSORGRID_MODELS_LLAMA_HPARAMS_H_
