#include "models/llama_hparams.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace tg {
namespace {

// Sanity bounds: far above any real model, low enough that sizes computed from them fit.
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxExperts = 512;  // llama.cpp's LLAMA_MAX_EXPERTS.

absl::StatusOr<int64_t> ReadDim(const GgufFile& f, const std::string& key, int64_t max) {
  absl::StatusOr<int64_t> v = f.GetI64(key);
  if (!v.ok())
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", v.status().message()));
  if (*v <= 0 || *v > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s = %d is out of range [1, %d]", f.path(), key, *v, max));
  }
  return *v;
}

absl::StatusOr<float> ReadFloat(const GgufFile& f, const std::string& key, float fallback) {
  if (!f.Has(key)) return fallback;
  absl::StatusOr<float> v = f.GetF32(key);
  if (!v.ok())
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", v.status().message()));
  if (!std::isfinite(*v) || *v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s = %g must be positive", f.path(), key, *v));
  }
  return *v;
}

absl::StatusOr<LlamaArch> ParseArch(const GgufFile& f, std::string* name) {
  absl::StatusOr<std::string> arch = f.GetString("general.architecture");
  if (!arch.ok())
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", arch.status().message()));
  *name = *arch;
  if (*arch == "llama") return LlamaArch::kLlama;
  if (*arch == "mistral") return LlamaArch::kMistral;
  if (*arch == "qwen2") return LlamaArch::kQwen2;
  if (*arch == "qwen3") return LlamaArch::kQwen3;
  if (*arch == "qwen3moe") return LlamaArch::kQwen3Moe;
  if (*arch == "gpt-oss") return LlamaArch::kGptOss;
  return absl::UnimplementedError(
      absl::StrCat(f.path(), ": unsupported architecture '", *arch,
                   "' (supported: llama, mistral, qwen2, qwen3, qwen3moe, gpt-oss)"));
}

// The experts of qwen3moe (always) and of llama/mistral with expert_count > 0 (mixtral), with
// llama.cpp's keys and defaults: both renormalise the chosen experts' weights.
absl::Status ReadExperts(const GgufFile& f, const std::string& a, LlamaHParams* hp) {
  const bool required = hp->arch == LlamaArch::kQwen3Moe || hp->arch == LlamaArch::kGptOss;
  if (!required && !f.Has(a + "expert_count")) return absl::OkStatus();
  if (!required) {
    TG_ASSIGN_OR_RETURN(const int64_t n, f.GetI64(a + "expert_count"));
    if (n == 0) return absl::OkStatus();  // a dense model that writes the key.
  }
  if (hp->arch != LlamaArch::kLlama && hp->arch != LlamaArch::kMistral && !required) {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": experts in a ", hp->arch_name, " model are not supported"));
  }
  TG_ASSIGN_OR_RETURN(hp->n_expert, ReadDim(f, a + "expert_count", kMaxExperts));
  TG_ASSIGN_OR_RETURN(hp->n_expert_used, ReadDim(f, a + "expert_used_count", hp->n_expert));
  hp->n_ff_exp = hp->n_ff;
  if (hp->arch == LlamaArch::kGptOss) {
    TG_ASSIGN_OR_RETURN(hp->n_ff_exp, ReadDim(f, a + "expert_feed_forward_length", kMaxDim));
  } else if (hp->arch == LlamaArch::kQwen3Moe) {
    hp->n_ff_exp = hp->n_ff / hp->n_expert_used;  // llama.cpp's default without the key.
    if (f.Has(a + "expert_feed_forward_length")) {
      TG_ASSIGN_OR_RETURN(hp->n_ff_exp, ReadDim(f, a + "expert_feed_forward_length", kMaxDim));
    }
  }
  if (hp->n_ff_exp < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expert width %d", f.path(), hp->n_ff_exp));
  }
  // gpt-oss softmaxes the chosen experts' logits, which sum to 1 already.
  hp->expert_weights_norm = hp->arch != LlamaArch::kGptOss;
  if (f.Has(a + "expert_weights_scale")) {
    TG_ASSIGN_OR_RETURN(const float scale, f.GetF32(a + "expert_weights_scale"));
    if (!std::isfinite(scale) || scale < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %sexpert_weights_scale = %g must be finite and >= 0", f.path(), a, scale));
    }
    if (scale != 0.0f) hp->expert_weights_scale = scale;
  }
  return absl::OkStatus();
}

// llama.cpp's YaRN setup (llama_context): ext_factor 1; attn_factor = mscale(factor) /
// (1 + 0.1 ln factor), which is 1 unless the file sets rope.scaling.attn_factor (the division
// cancels the magnitude correction ROPE applies itself when ext_factor != 0).
absl::Status ReadYarn(const GgufFile& f, const std::string& a, LlamaHParams* hp) {
  if (f.Has(a + "rope.scaling.yarn_log_multiplier")) {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": ", a, "rope.scaling.yarn_log_multiplier is not supported"));
  }
  hp->rope_ext_factor = 1.0f;
  TG_ASSIGN_OR_RETURN(hp->rope_attn_factor, ReadFloat(f, a + "rope.scaling.attn_factor", 1.0f));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaHParams> ReadLlamaHParams(const GgufFile& f) {
  LlamaHParams hp;
  TG_ASSIGN_OR_RETURN(hp.arch, ParseArch(f, &hp.arch_name));
  const std::string a = hp.arch_name + ".";
  TG_ASSIGN_OR_RETURN(hp.n_embd, ReadDim(f, a + "embedding_length", kMaxDim));
  TG_ASSIGN_OR_RETURN(hp.n_ff, ReadDim(f, a + "feed_forward_length", kMaxDim));
  TG_ASSIGN_OR_RETURN(hp.n_layer, ReadDim(f, a + "block_count", kMaxLayers));
  TG_ASSIGN_OR_RETURN(hp.n_head, ReadDim(f, a + "attention.head_count", kMaxDim));
  hp.n_head_kv = hp.n_head;
  if (f.Has(a + "attention.head_count_kv")) {
    TG_ASSIGN_OR_RETURN(hp.n_head_kv, ReadDim(f, a + "attention.head_count_kv", hp.n_head));
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d heads cannot be grouped over %d KV heads", f.path(), hp.n_head, hp.n_head_kv));
  }
  hp.head_dim = hp.n_embd / hp.n_head;
  if (f.Has(a + "attention.key_length")) {
    TG_ASSIGN_OR_RETURN(hp.head_dim, ReadDim(f, a + "attention.key_length", kMaxDim));
  } else if (hp.n_embd % hp.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: n_embd %d is not a multiple of %d heads",
                                                      f.path(), hp.n_embd, hp.n_head));
  }
  hp.n_rot = hp.head_dim;
  if (f.Has(a + "rope.dimension_count")) {
    TG_ASSIGN_OR_RETURN(hp.n_rot, ReadDim(f, a + "rope.dimension_count", hp.head_dim));
  }
  if (hp.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: odd rope dimension count %d", f.path(), hp.n_rot));
  }
  hp.n_ctx_train = 2048;
  if (f.Has(a + "context_length")) {
    TG_ASSIGN_OR_RETURN(hp.n_ctx_train, ReadDim(f, a + "context_length", int64_t{1} << 24));
  }
  TG_ASSIGN_OR_RETURN(hp.rms_eps, ReadFloat(f, a + "attention.layer_norm_rms_epsilon", 1e-5f));
  TG_ASSIGN_OR_RETURN(hp.rope_freq_base, ReadFloat(f, a + "rope.freq_base", 10000.0f));
  if (f.Has(a + "rope.scaling.type")) {
    TG_ASSIGN_OR_RETURN(std::string type, f.GetString(a + "rope.scaling.type"));
    if (type == "linear" || type == "yarn") {
      TG_ASSIGN_OR_RETURN(float factor, ReadFloat(f, a + "rope.scaling.factor", 1.0f));
      hp.rope_freq_scale = 1.0f / factor;
    } else if (type != "none") {
      return absl::UnimplementedError(absl::StrCat(f.path(), ": rope scaling '", type,
                                                   "' is not supported (linear, yarn, none)"));
    }
    if (type == "yarn") TG_RETURN_IF_ERROR(ReadYarn(f, a, &hp));
  }
  hp.rope_n_ctx_orig = hp.n_ctx_train;
  if (f.Has(a + "rope.scaling.original_context_length")) {
    TG_ASSIGN_OR_RETURN(hp.rope_n_ctx_orig,
                        ReadDim(f, a + "rope.scaling.original_context_length", int64_t{1} << 24));
  }
  const bool qwen3 = hp.arch == LlamaArch::kQwen3 || hp.arch == LlamaArch::kQwen3Moe;
  const bool gpt_oss = hp.arch == LlamaArch::kGptOss;
  hp.rope_neox = hp.arch == LlamaArch::kQwen2 || qwen3 || gpt_oss;
  hp.has_qkv_bias = hp.arch == LlamaArch::kQwen2 || gpt_oss;
  if (gpt_oss) {
    hp.has_o_bias = hp.has_sinks = hp.gpt_oss_moe = true;
    TG_ASSIGN_OR_RETURN(hp.n_swa, ReadDim(f, a + "attention.sliding_window", int64_t{1} << 24));
  }
  hp.has_qk_norm = qwen3;
  TG_RETURN_IF_ERROR(ReadExperts(f, a, &hp));
  TG_ASSIGN_OR_RETURN(std::vector<std::string> tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  hp.n_vocab = static_cast<int64_t>(tokens.size());
  if (hp.n_vocab == 0 || hp.n_vocab > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: vocabulary of %d tokens", f.path(), hp.n_vocab));
  }
  return hp;
}

}  // namespace tg
