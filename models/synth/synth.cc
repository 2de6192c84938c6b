// Builds the synthetic llama model of `tg-gguf synth` (see synth.h): metadata, vocabulary,
// tensor list with per-tensor type fallback, random weights, one atomic write.
#include "models/synth/synth.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "gguf/gguf_writer.h"
#include "models/synth/synth_mix.h"
#include "models/synth/synth_vocab.h"
#include "models/synth/synth_weights.h"

namespace tg::synth {
namespace {

constexpr float kWeightStddev = 0.02f;  // the usual init of transformer matrices.
constexpr float kNormStddev = 0.01f;    // norm weights are 1 + this much noise.
constexpr float kRmsEps = 1e-5f;
constexpr float kRopeFreqBase = 10000.0f;
constexpr uint32_t kAlignment = 32;
constexpr uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION for current blocks.
constexpr size_t kFallbackNamesShown = 4;
// gpt-oss: biases and sinks are f32 vectors of mean 0; sinks spread like attention logits so
// that they take a visible share of each softmax.
constexpr float kBiasStddev = 0.1f;
constexpr float kSinkStddev = 1.0f;
// gpt-oss's YaRN rope and rope base as the released models have them.
constexpr float kGptOssRopeFreqBase = 150000.0f;
constexpr float kGptOssYarnFactor = 32.0f;
constexpr uint32_t kGptOssYarnOrigCtx = 4096;
// The released models' window is 128; a synthetic model's is short so that a CI-sized prompt
// plus 32 generated tokens crosses it.
constexpr uint32_t kGptOssSlidingWindow = 16;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

struct TensorSpec {
  std::string name;
  int64_t ne0;
  int64_t ne1;  // 1 for the norm vectors.
  bool norm;
  int64_t layer = -1;  // the block, -1 outside the blocks.
  int64_t ne2 = 1;     // the experts of a stacked expert tensor.
  bool f32 = false;    // kept in f32 whatever the type (llama-quantize keeps the router).
  // Non-zero: an f32 bias or sink tensor (1-d when ne1 is 1) of mean 0 and this spread.
  float stddev = 0.0f;
  bool mxfp4 = false;  // gpt-oss's experts: MXFP4 whatever the type, as the released files.
};

// An f32 bias (or sinks) of `n0` x `n1` in block `i`.
TensorSpec Bias(const std::string& name, int64_t n0, int64_t n1, int64_t i,
                float stddev = kBiasStddev) {
  return {name, n0, n1, false, i, 1, true, stddev};
}

// gpt-oss's feed-forward: the router with its bias, the MXFP4 experts with theirs.
void AddGptOssFfnTensors(const SynthOptions& o, const std::string& blk, int64_t i,
                         std::vector<TensorSpec>* specs) {
  const int64_t d = o.dims.n_embd, f = o.experts.n_ff, e = o.experts.n_expert;
  specs->push_back({blk + "ffn_gate_inp.weight", d, e, false, i, 1, true});
  specs->push_back(Bias(blk + "ffn_gate_inp.bias", e, 1, i));
  for (const char* w : {"ffn_gate_exps", "ffn_up_exps"}) {
    specs->push_back({absl::StrCat(blk, w, ".weight"), d, f, false, i, e, false, 0.0f, true});
    specs->push_back(Bias(absl::StrCat(blk, w, ".bias"), f, e, i));
  }
  specs->push_back({blk + "ffn_down_exps.weight", f, d, false, i, e, false, 0.0f, true});
  specs->push_back(Bias(blk + "ffn_down_exps.bias", d, e, i));
}

// The feed-forward of block `blk`: dense, or the router and the stacked experts.
void AddFfnTensors(const SynthOptions& o, const std::string& blk, int64_t i,
                   std::vector<TensorSpec>* specs) {
  const SynthDims& d = o.dims;
  if (o.arch == SynthArch::kGptOss) return AddGptOssFfnTensors(o, blk, i, specs);
  if (o.arch == SynthArch::kLlama) {
    specs->push_back({blk + "ffn_gate.weight", d.n_embd, d.n_ff, false, i});
    specs->push_back({blk + "ffn_up.weight", d.n_embd, d.n_ff, false, i});
    specs->push_back({blk + "ffn_down.weight", d.n_ff, d.n_embd, false, i});
    return;
  }
  const SynthExperts& e = o.experts;
  specs->push_back({blk + "ffn_gate_inp.weight", d.n_embd, e.n_expert, false, i, 1, true});
  specs->push_back({blk + "ffn_gate_exps.weight", d.n_embd, e.n_ff, false, i, e.n_expert});
  specs->push_back({blk + "ffn_up_exps.weight", d.n_embd, e.n_ff, false, i, e.n_expert});
  specs->push_back({blk + "ffn_down_exps.weight", e.n_ff, d.n_embd, false, i, e.n_expert});
}

std::vector<TensorSpec> LlamaTensors(const SynthOptions& o) {
  const SynthDims& d = o.dims;
  std::vector<TensorSpec> specs = {{"token_embd.weight", d.n_embd, d.n_vocab, false}};
  for (int64_t i = 0; i < d.n_layer; ++i) {
    const std::string blk = absl::StrCat("blk.", i, ".");
    specs.push_back({blk + "attn_norm.weight", d.n_embd, 1, true, i});
    specs.push_back({blk + "attn_q.weight", d.n_embd, d.n_embd, false, i});
    specs.push_back({blk + "attn_k.weight", d.n_embd, d.n_embd_kv(), false, i});
    specs.push_back({blk + "attn_v.weight", d.n_embd, d.n_embd_kv(), false, i});
    specs.push_back({blk + "attn_output.weight", d.n_embd, d.n_embd, false, i});
    if (o.arch == SynthArch::kQwen3Moe) {
      specs.push_back({blk + "attn_q_norm.weight", d.head_dim(), 1, true, i});
      specs.push_back({blk + "attn_k_norm.weight", d.head_dim(), 1, true, i});
    }
    if (o.arch == SynthArch::kGptOss) {
      specs.push_back(Bias(blk + "attn_q.bias", d.n_embd, 1, i));
      specs.push_back(Bias(blk + "attn_k.bias", d.n_embd_kv(), 1, i));
      specs.push_back(Bias(blk + "attn_v.bias", d.n_embd_kv(), 1, i));
      specs.push_back(Bias(blk + "attn_output.bias", d.n_embd, 1, i));
      specs.push_back(Bias(blk + "attn_sinks.weight", d.n_head, 1, i, kSinkStddev));
    }
    // gpt-oss names the norm before the feed-forward after the attention it follows.
    const char* ffn_norm =
        o.arch == SynthArch::kGptOss ? "post_attention_norm.weight" : "ffn_norm.weight";
    specs.push_back({blk + ffn_norm, d.n_embd, 1, true, i});
    AddFfnTensors(o, blk, i, &specs);
  }
  specs.push_back({"output_norm.weight", d.n_embd, 1, true});
  specs.push_back({"output.weight", d.n_embd, d.n_vocab, false});
  return specs;
}

// The type a tensor is stored in: norms in f32, matrices as synth_mix.h chooses.
MatrixType TensorType(const SynthOptions& o, const TensorSpec& s) {
  if (s.norm || s.f32) return {DType::kF32, DType::kF32};
  if (s.mxfp4) return {DType::kMXFP4, DType::kMXFP4};
  return ChooseMatrixType(o.type, o.mix, {s.name, s.layer, s.ne0}, o.dims.n_layer);
}

// The experts' keys; qwen3moe also names its head size (attention.key_length) as llama.cpp's
// converter writes it.
void SetExpertMetadata(const SynthOptions& o, const std::string& a, GgufWriter* w) {
  if (o.arch == SynthArch::kLlama) return;
  w->SetU32(a + "expert_count", static_cast<uint32_t>(o.experts.n_expert));
  w->SetU32(a + "expert_used_count", static_cast<uint32_t>(o.experts.n_used));
  if (o.arch == SynthArch::kMixtral) return;
  w->SetU32(a + "expert_feed_forward_length", static_cast<uint32_t>(o.experts.n_ff));
  w->SetU32(a + "attention.key_length", static_cast<uint32_t>(o.dims.head_dim()));
  w->SetU32(a + "attention.value_length", static_cast<uint32_t>(o.dims.head_dim()));
}

// gpt-oss's window and YaRN rope scaling as the released models have them.
void SetGptOssMetadata(const std::string& a, GgufWriter* w) {
  w->SetU32(a + "attention.sliding_window", kGptOssSlidingWindow);
  w->SetString(a + "rope.scaling.type", "yarn");
  w->SetF32(a + "rope.scaling.factor", kGptOssYarnFactor);
  w->SetU32(a + "rope.scaling.original_context_length", kGptOssYarnOrigCtx);
}

void SetModelMetadata(const SynthOptions& o, GgufWriter* w) {
  const SynthDims& d = o.dims;
  const std::string a = absl::StrCat(GgufArchName(o.arch), ".");
  w->SetString("general.architecture", GgufArchName(o.arch));
  const std::string moe = o.arch == SynthArch::kLlama
                              ? ""
                              : absl::StrCat(SynthArchName(o.arch), "-", o.experts.n_expert, "x",
                                             o.experts.n_used, "x", o.experts.n_ff, "-");
  w->SetString("general.name",
               absl::StrCat("tensorgrid-synth-", moe, o.dims_text, "-", o.type_name));
  w->SetU32("general.alignment", kAlignment);
  w->SetU32("general.file_type", o.file_type);
  if (IsQuantized(o.type)) w->SetU32("general.quantization_version", kQuantizationVersion);
  w->SetU32(a + "context_length", static_cast<uint32_t>(o.ctx));
  w->SetU32(a + "embedding_length", static_cast<uint32_t>(d.n_embd));
  w->SetU32(a + "feed_forward_length", static_cast<uint32_t>(d.n_ff));
  w->SetU32(a + "block_count", static_cast<uint32_t>(d.n_layer));
  w->SetU32(a + "attention.head_count", static_cast<uint32_t>(d.n_head));
  w->SetU32(a + "attention.head_count_kv", static_cast<uint32_t>(d.n_head_kv));
  w->SetU32(a + "rope.dimension_count", static_cast<uint32_t>(d.head_dim()));
  w->SetF32(a + "attention.layer_norm_rms_epsilon", kRmsEps);
  w->SetF32(a + "rope.freq_base",
            o.arch == SynthArch::kGptOss ? kGptOssRopeFreqBase : kRopeFreqBase);
  w->SetU32(a + "vocab_size", static_cast<uint32_t>(d.n_vocab));
  SetExpertMetadata(o, a, w);
  if (o.arch == SynthArch::kGptOss) SetGptOssMetadata(a, w);
  if (!o.chat_template.empty()) w->SetString("tokenizer.chat_template", o.chat_template);
}

void SetTokenizerMetadata(const SpmVocab& v, GgufWriter* w) {
  w->SetString("tokenizer.ggml.model", "llama");
  w->SetString("tokenizer.ggml.pre", "default");
  w->SetStringArray("tokenizer.ggml.tokens", v.tokens);
  w->SetF32Array("tokenizer.ggml.scores", v.scores);
  w->SetI32Array("tokenizer.ggml.token_type", v.types);
  w->SetU32("tokenizer.ggml.bos_token_id", kBosId);
  w->SetU32("tokenizer.ggml.eos_token_id", kEosId);
  w->SetU32("tokenizer.ggml.unknown_token_id", kUnkId);
  w->SetBool("tokenizer.ggml.add_bos_token", true);
  w->SetBool("tokenizer.ggml.add_eos_token", false);
}

// gpt-oss's tokenizer as llama.cpp names it: byte-level BPE with the o200k ("gpt-4o")
// pre-tokenizer, no BOS added.
void SetBpeTokenizerMetadata(const BpeVocab& v, GgufWriter* w) {
  w->SetString("tokenizer.ggml.model", "gpt2");
  w->SetString("tokenizer.ggml.pre", "gpt-4o");
  w->SetStringArray("tokenizer.ggml.tokens", v.tokens);
  w->SetI32Array("tokenizer.ggml.token_type", v.types);
  w->SetStringArray("tokenizer.ggml.merges", v.merges);
  w->SetU32("tokenizer.ggml.bos_token_id", v.bos);
  w->SetU32("tokenizer.ggml.eos_token_id", v.eos);
  w->SetBool("tokenizer.ggml.add_bos_token", false);
  w->SetBool("tokenizer.ggml.add_eos_token", false);
}

struct SynthStats {
  int64_t params = 0;
  std::vector<std::pair<std::string, MatrixType>> matrices;
};

// The writer holds every tensor until the file is written: refuse what cannot fit in memory
// rather than dying in the allocator half-way.
absl::Status CheckFitsInMemory(const SynthOptions& o) {
  uint64_t bytes = 0;
  for (const TensorSpec& s : LlamaTensors(o)) {
    const DType type = TensorType(o, s).stored;
    // dims <= 2^20 and experts <= 512: no overflow.
    bytes += RowBytes(type, s.ne0) * static_cast<uint64_t>(s.ne1 * s.ne2);
  }
  const uint64_t memory = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                          static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > memory) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the model takes %.1f GiB, more than this machine's memory (%.1f GiB); synth builds it "
        "in memory",
        static_cast<double>(bytes) / kGiB, static_cast<double>(memory) / kGiB));
  }
  return absl::OkStatus();
}

absl::Status AddTensors(const SynthOptions& o, GgufWriter* w, SynthStats* stats) {
  for (const TensorSpec& s : LlamaTensors(o)) {
    const MatrixType mt = TensorType(o, s);
    const DType type = mt.stored;
    if (!s.norm && s.stddev == 0.0f) stats->matrices.emplace_back(s.name, mt);
    const uint64_t seed = TensorSeed(o.seed, s.name);
    const float mean = s.norm ? 1.0f : 0.0f;
    const float stddev = s.norm ? kNormStddev : s.stddev != 0.0f ? s.stddev : kWeightStddev;
    std::vector<uint8_t> data =
        RandomTensor(type, s.ne0, s.ne1 * s.ne2, mean, stddev, seed, o.threads);
    stats->params += s.ne0 * s.ne1 * s.ne2;
    std::vector<int64_t> ne = {s.ne0};
    if (!s.norm && (s.stddev == 0.0f || s.ne1 > 1)) ne.push_back(s.ne1);
    if (s.ne2 > 1) ne.push_back(s.ne2);
    TG_RETURN_IF_ERROR(w->AddTensor(s.name, type, ne, std::move(data)));
  }
  return absl::OkStatus();
}

// "n1 tensors, n2 ..." with the first few names.
std::string NameList(std::vector<std::string> names) {
  const size_t n = names.size();
  if (n > kFallbackNamesShown) {
    names.resize(kFallbackNamesShown);
    names.push_back("...");
  }
  return absl::StrCat(n, n == 1 ? " tensor: " : " tensors: ", absl::StrJoin(names, ", "));
}

// One line per type the mix chose besides the base type, and one per fallback type.
void PrintTypeChoices(const SynthOptions& o, const SynthStats& st, std::FILE* out) {
  for (DType type : kAllDTypes) {
    std::vector<std::string> chosen, fell_back;
    DType fallback_from = type;
    for (const auto& [name, mt] : st.matrices) {
      if (mt.wanted == type && type != o.type) chosen.push_back(name);
      if (mt.stored == type && mt.stored != mt.wanted) {
        fell_back.push_back(name);
        fallback_from = mt.wanted;
      }
    }
    if (!chosen.empty()) {
      absl::FPrintF(out, "tg-gguf: %s mix puts %s in %s\n", o.type_name, NameList(chosen),
                    DTypeName(type));
    }
    if (!fell_back.empty()) {
      absl::FPrintF(out,
                    "tg-gguf: %s stored as %s (rows not a multiple of the %s block of %d, "
                    "llama.cpp's fallback)\n",
                    NameList(fell_back), DTypeName(type), DTypeName(fallback_from),
                    BlockSize(fallback_from));
    }
  }
}

void PrintSummary(const SynthOptions& o, const SynthStats& st, size_t n_tensors, double seconds,
                  std::FILE* out) {
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(o.out, ec);
  absl::FPrintF(out, "tg-gguf: wrote %s (%.1f MiB): %s %s %s, %d tensors, %.2fM params in %.2f s\n",
                o.out, ec ? 0.0 : static_cast<double>(bytes) / kMiB, SynthArchName(o.arch),
                o.dims_text, o.type_name, n_tensors, static_cast<double>(st.params) / 1e6, seconds);
  PrintTypeChoices(o, st, out);
}

}  // namespace

absl::Status RunSynth(const SynthOptions& opts, std::FILE* out) {
  TG_RETURN_IF_ERROR(CheckFitsInMemory(opts));
  const auto start = std::chrono::steady_clock::now();
  GgufWriter w(kAlignment);
  SetModelMetadata(opts, &w);
  if (opts.arch == SynthArch::kGptOss) {
    SetBpeTokenizerMetadata(MakeBpeVocab(opts.dims.n_vocab), &w);
  } else {
    SetTokenizerMetadata(MakeSpmVocab(opts.dims.n_vocab), &w);
  }
  SynthStats stats;
  TG_RETURN_IF_ERROR(AddTensors(opts, &w, &stats));
  TG_RETURN_IF_ERROR(w.WriteFile(opts.out));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintSummary(opts, stats, LlamaTensors(opts).size(), seconds, out);
  return absl::OkStatus();
}

}  // namespace tg::synth
