// Parsing and validation of `tg-gguf synth` arguments (see synth_options.h).
#include "models/synth/synth_options.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/enum_names.h"
#include "core/status_macros.h"

namespace tg::synth {
namespace {

constexpr int kNumDims = 6;
constexpr int64_t kMaxDim = int64_t{1} << 20;  // far above real models; keeps sizes in int64.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxCtx = int64_t{1} << 24;
// More generator threads than any machine has cores is a typo.
constexpr int kMaxThreads = 1024;
constexpr int64_t kSpecialTokens = 3;  // <unk>, <s>, </s>.
constexpr int64_t kByteTokens = 256;
constexpr int64_t kMinPieces = 8;  // a few real pieces ("▁", common words) after the bytes.
constexpr char kUsageDims[] = "n_embd,n_ff,n_layer,n_head,n_head_kv,n_vocab";
constexpr int64_t kMaxExperts = 512;  // llama.cpp's LLAMA_MAX_EXPERTS.
constexpr const char* kFlags[] = {"--dims",      "--type",         "--seed",    "--ctx",
                                  "--threads",   "--arch",         "--experts", "--experts-used",
                                  "--expert-ff", "--chat-template"};
// --arch's names, which are also general.architecture's but for mixtral (GgufArchName).
constexpr EnumName<SynthArch> kArchNames[] = {
    {SynthArch::kLlama, "llama"},
    {SynthArch::kQwen3Moe, "qwen3moe"},
    {SynthArch::kMixtral, "mixtral"},
    {SynthArch::kGptOss, "gpt-oss"},
};

// The --type choices: one type for every matrix, or a llama.cpp k-quant mix around a base
// type; file_type is llama.cpp's LLAMA_FTYPE for general.file_type (the closest one for a
// single type: the _S variant of a k-quant).
struct TypeChoice {
  const char* name;
  DType type;
  TypeMix mix;
  uint32_t file_type;
};
constexpr TypeChoice kTypes[] = {
    {"f32", DType::kF32, TypeMix::kPure, 0},
    {"f16", DType::kF16, TypeMix::kPure, 1},
    {"q4_0", DType::kQ4_0, TypeMix::kPure, 2},
    {"q8_0", DType::kQ8_0, TypeMix::kPure, 7},
    {"q5_0", DType::kQ5_0, TypeMix::kPure, 8},
    {"q5_1", DType::kQ5_1, TypeMix::kPure, 9},
    {"q2_k", DType::kQ2_K, TypeMix::kPure, 10},  // LLAMA_FTYPE_MOSTLY_Q2_K
    {"q3_k", DType::kQ3_K, TypeMix::kPure, 11},  // LLAMA_FTYPE_MOSTLY_Q3_K_S
    {"q4_k", DType::kQ4_K, TypeMix::kPure, 14},  // LLAMA_FTYPE_MOSTLY_Q4_K_S
    {"q5_k", DType::kQ5_K, TypeMix::kPure, 16},  // LLAMA_FTYPE_MOSTLY_Q5_K_S
    {"iq4_nl", DType::kIQ4_NL, TypeMix::kPure, 25},
    {"iq4_xs", DType::kIQ4_XS, TypeMix::kPure, 30},
    {"mxfp4", DType::kMXFP4, TypeMix::kPure, 38},  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    {"q4_k_m", DType::kQ4_K, TypeMix::kKQuantsM, 15},
    {"q5_k_m", DType::kQ5_K, TypeMix::kKQuantsM, 17},
};

std::string TypeNames() {
  std::string names;
  for (const TypeChoice& t : kTypes) absl::StrAppend(&names, names.empty() ? "" : " ", t.name);
  return names;
}

// The --type names of one kind: one type for every matrix (kPure) or a mix, `separator` apart.
std::string TypeNames(bool mixes, absl::string_view separator) {
  std::string names;
  for (const TypeChoice& t : kTypes) {
    if ((t.mix != TypeMix::kPure) != mixes) continue;
    absl::StrAppend(&names, names.empty() ? "" : separator, t.name);
  }
  return names;
}

absl::Status ParseDims(absl::string_view text, SynthOptions* opts) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  if (parts.size() != kNumDims) {
    return absl::InvalidArgumentError(absl::StrCat("--dims '", text, "' has ", parts.size(),
                                                   " values, expected ", kNumDims, " (", kUsageDims,
                                                   ")"));
  }
  int64_t v[kNumDims];
  for (int i = 0; i < kNumDims; ++i) {
    if (!absl::SimpleAtoi(parts[i], &v[i]) || v[i] < 1 || v[i] > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dims value '", parts[i], "' is not a number from 1 to ", kMaxDim));
    }
  }
  opts->dims = {v[0], v[1], v[2], v[3], v[4], v[5]};
  opts->dims_text = absl::StrJoin(v, ",");
  return absl::OkStatus();
}

absl::Status CheckDims(const SynthDims& d) {
  if (d.n_layer > kMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_layer ", d.n_layer, " is more than ", kMaxLayers));
  }
  if (d.n_embd % d.n_head != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_embd ", d.n_embd, " is not a multiple of n_head ", d.n_head));
  }
  if (d.head_dim() % 2 != 0) {  // rope rotates pairs of dimensions.
    return absl::InvalidArgumentError(
        absl::StrCat("head size n_embd / n_head = ", d.head_dim(), " must be even"));
  }
  if (d.n_head_kv > d.n_head || d.n_head % d.n_head_kv != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_head ", d.n_head, " is not a multiple of n_head_kv ", d.n_head_kv));
  }
  if (d.n_vocab < MinSynthVocab()) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_vocab ", d.n_vocab, " is too small: the vocabulary needs 3 special + ",
                     kByteTokens, " byte tokens + ", kMinPieces, " pieces = ", MinSynthVocab()));
  }
  return absl::OkStatus();
}

absl::Status ParseType(absl::string_view text, SynthOptions* opts) {
  const std::string lower = absl::AsciiStrToLower(text);
  for (const TypeChoice& t : kTypes) {
    if (lower == t.name) {
      opts->type = t.type;
      opts->mix = t.mix;
      opts->type_name = t.name;
      opts->file_type = t.file_type;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --type '", text, "' (types: ", TypeNames(), ")"));
}

absl::Status ParseArch(absl::string_view text, SynthOptions* opts) {
  if (std::optional<SynthArch> arch = ValueOf(kArchNames, text)) {
    opts->arch = *arch;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --arch '", text, "' (architectures: ", NameList(kArchNames, " "), ")"));
}

absl::Status ParseCount(absl::string_view flag, absl::string_view value, int64_t max,
                        int64_t* out) {
  if (absl::SimpleAtoi(value, out) && *out >= 1 && *out <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("bad ", flag, " '", value, "' (need a number from 1 to ", max, ")"));
}

// The expert flags go with a MoE --arch, which needs --experts and --experts-used.
absl::Status CheckExperts(SynthOptions* opts) {
  SynthExperts& e = opts->experts;
  if (opts->arch == SynthArch::kLlama) {
    if (e.n_expert != 0 || e.n_used != 0 || e.n_ff != 0) {
      return absl::InvalidArgumentError(
          "--experts, --experts-used and --expert-ff need --arch qwen3moe, mixtral or gpt-oss");
    }
    return absl::OkStatus();
  }
  if (e.n_expert == 0 || e.n_used == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--arch ", SynthArchName(opts->arch),
                                                   " needs --experts E and --experts-used K"));
  }
  if (e.n_used > e.n_expert) {
    return absl::InvalidArgumentError(
        absl::StrCat("--experts-used ", e.n_used, " is more than --experts ", e.n_expert));
  }
  if (opts->arch == SynthArch::kMixtral && e.n_ff != 0 && e.n_ff != opts->dims.n_ff) {
    return absl::InvalidArgumentError(absl::StrCat("mixtral's experts are n_ff = ", opts->dims.n_ff,
                                                   " wide; drop --expert-ff ", e.n_ff,
                                                   " or set it in --dims"));
  }
  if (e.n_ff == 0) e.n_ff = opts->dims.n_ff;
  if (opts->arch == SynthArch::kGptOss && (opts->dims.n_embd % BlockSize(DType::kMXFP4) != 0 ||
                                           e.n_ff % BlockSize(DType::kMXFP4) != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpt-oss's experts are MXFP4: n_embd ", opts->dims.n_embd, " and the expert width ", e.n_ff,
        " must be multiples of its block of ", BlockSize(DType::kMXFP4)));
  }
  return absl::OkStatus();
}

absl::Status ApplyFlag(absl::string_view flag, absl::string_view value, SynthOptions* opts,
                       bool* have_dims, bool* have_type) {
  if (flag == "--arch") return ParseArch(value, opts);
  if (flag == "--experts") return ParseCount(flag, value, kMaxExperts, &opts->experts.n_expert);
  if (flag == "--experts-used") {
    return ParseCount(flag, value, kMaxExperts, &opts->experts.n_used);
  }
  if (flag == "--expert-ff") return ParseCount(flag, value, kMaxDim, &opts->experts.n_ff);
  if (flag == "--dims") {
    *have_dims = true;
    return ParseDims(value, opts);
  }
  if (flag == "--type") {
    *have_type = true;
    return ParseType(value, opts);
  }
  if (flag == "--chat-template") {
    std::ifstream in{std::string(value), std::ios::binary};
    std::ostringstream text;
    text << in.rdbuf();
    if (!in || text.str().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat-template: cannot read a template from '", value, "'"));
    }
    opts->chat_template = text.str();
    return absl::OkStatus();
  }
  if (flag == "--seed") {
    if (absl::SimpleAtoi(value, &opts->seed)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("bad --seed '", value, "'"));
  }
  if (flag == "--threads") {
    if (absl::SimpleAtoi(value, &opts->threads) && opts->threads >= 0 &&
        opts->threads <= kMaxThreads) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "bad --threads '", value, "' (need 0 for every core, or 1 to ", kMaxThreads, ")"));
  }
  if (absl::SimpleAtoi(value, &opts->ctx) && opts->ctx >= 1 && opts->ctx <= kMaxCtx) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad --ctx '", value, "' (need a number from 1 to ", kMaxCtx, ")"));
}

}  // namespace

int64_t MinSynthVocab() { return kSpecialTokens + kByteTokens + kMinPieces; }

const char* SynthArchName(SynthArch arch) { return NameOf(kArchNames, arch, "llama"); }

const char* GgufArchName(SynthArch arch) {
  if (arch == SynthArch::kMixtral) return "llama";
  return SynthArchName(arch);
}

absl::StatusOr<SynthOptions> ParseSynthOptions(absl::Span<char* const> args) {
  SynthOptions opts;
  bool have_dims = false;
  bool have_type = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const absl::string_view arg = args[i];
    if (arg.empty() || arg[0] != '-') {
      if (!opts.out.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
      }
      opts.out = std::string(arg);
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      SynthOptions help;
      help.help = true;
      return help;
    }
    if (std::find(std::begin(kFlags), std::end(kFlags), arg) == std::end(kFlags)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag '", arg, "' (flags: --dims ", kUsageDims,
          " --type T --seed S --ctx N --threads N --arch A --experts E --experts-used K "
          "--expert-ff F --chat-template FILE; see tg-gguf synth --help)"));
    }
    if (i + 1 >= args.size()) {
      return absl::InvalidArgumentError(absl::StrCat("flag ", arg, " needs a value"));
    }
    TG_RETURN_IF_ERROR(ApplyFlag(arg, args[i + 1], &opts, &have_dims, &have_type));
    ++i;
  }
  if (opts.out.empty()) return absl::InvalidArgumentError("synth needs an output file");
  if (!have_dims) {
    return absl::InvalidArgumentError(absl::StrCat("synth needs --dims ", kUsageDims));
  }
  if (!have_type) {
    return absl::InvalidArgumentError(
        absl::StrCat("synth needs --type (one of: ", TypeNames(), ")"));
  }
  TG_RETURN_IF_ERROR(CheckDims(opts.dims));
  TG_RETURN_IF_ERROR(CheckExperts(&opts));
  return opts;
}

std::string SynthUsage() {
  return absl::StrCat(
      "usage: tg-gguf synth OUT --dims ", kUsageDims, "\n",
      "                     --type T [--seed S (42)] [--ctx N (2048)] [--threads N (0: all)]\n",
      "                     [--arch ", NameList(kArchNames, "|"), " --experts E --experts-used K\n",
      "                      [--expert-ff F (n_ff)]] [--chat-template FILE]\n",
      "       T: ", TypeNames(/*mixes=*/false, "|"), " (every matrix)\n          or ",
      TypeNames(/*mixes=*/true, "|"), " (llama-quantize's mixes; docs/gguf.md)\n\n",
      "Writes a llama GGUF with random weights that tensorgrid and llama.cpp load; e.g. the\n",
      "stories15M shape: --dims 288,768,6,6,6,32000. A mixture-of-experts --arch (all but\n",
      "llama, the default) makes every feed-forward E experts of which the router picks K;\n",
      "gpt-oss's experts are MXFP4. --chat-template writes FILE's Jinja template as\n",
      "tokenizer.chat_template, the one tg-server renders chats with.\n");
}

}  // namespace tg::synth
