// The BPE pre-tokenizer chains; see pre_tokenizer.h. The patterns are those llama.cpp's
// llama-vocab.cpp lists for each pre-tokenizer type (from the models' tokenizer.json), and the
// custom steps stand where llama.cpp runs a hand-written splitter for that pattern.
#include "models/pre_tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/pre_tokenizer_custom.h"
#include "models/pre_tokenizer_regex.h"
#include "models/unicode.h"

namespace tg {
namespace {

using pre_tokenizer_internal::CustomSplitter;
using pre_tokenizer_internal::SplitCustom;

constexpr char kPreKey[] = "tokenizer.ggml.pre";

// One step of a chain: a split pattern, or (pattern null) a hand-written splitter.
struct StepSpec {
  const char* pattern;
  CustomSplitter custom;
};
constexpr StepSpec Pattern(const char* p) { return {p, CustomSplitter::kGpt2}; }
constexpr StepSpec Custom(CustomSplitter c) { return {nullptr, c}; }

// Runs of CJK ideographs, Samaritan..CJK (U+0800..U+4E00) and Hangul, as DeepSeek's tokenizers
// isolate them.
constexpr char kDeepseekCjk[] = "[一-龥ࠀ-一가-퟿]+";

struct ChainSpec {
  BpePreTokenizer kind;
  std::vector<StepSpec> steps;
};

const std::vector<ChainSpec>& ChainSpecs() {
  static const auto* specs = new std::vector<ChainSpec>{
      {BpePreTokenizer::kDefault,
       {Pattern("[\\p{P}\\$\\+<=>\\^~\\|]+"), Custom(CustomSplitter::kGpt2), Pattern("\\p{N}+"),
        Pattern("[0-9][0-9][0-9]")}},
      {BpePreTokenizer::kGpt2, {Custom(CustomSplitter::kGpt2)}},
      {BpePreTokenizer::kLlama3, {Custom(CustomSplitter::kLlama3)}},
      {BpePreTokenizer::kQwen2, {Custom(CustomSplitter::kQwen2)}},
      {BpePreTokenizer::kQwen35, {Custom(CustomSplitter::kQwen35)}},
      {BpePreTokenizer::kGpt4o, {Custom(CustomSplitter::kGpt4o)}},
      {BpePreTokenizer::kFalcon,
       {Pattern("[\\p{P}\\$\\+<=>\\^~\\|`]+"), Custom(CustomSplitter::kGpt2),
        Pattern("[0-9][0-9][0-9]")}},
      {BpePreTokenizer::kStarcoder, {Pattern("\\p{N}"), Custom(CustomSplitter::kGpt2)}},
      {BpePreTokenizer::kDeepseekLlm,
       {Pattern("[\\r\\n]"),
        // \s? and a run of cased letters: Latin, Greek, Coptic, Cyrillic, Armenian, Georgian,
        // Cherokee, letterlike symbols, Glagolitic, fullwidth A-Z, Deseret, Osage...
        Pattern("\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-"
                "ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-"
                "ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-"
                "𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"),
        // \s? and a run of ASCII, fullwidth and CJK punctuation and quotes.
        Pattern("\\s?[!-/:-~！-／：-～‘-‟　-。]+"), Pattern("\\s+$"), Pattern(kDeepseekCjk),
        Pattern("\\p{N}+")}},
      {BpePreTokenizer::kGemma4, {Pattern("[^\\n]+|[\\n]+")}},
      {BpePreTokenizer::kDeepseekCoder,
       {Pattern("[\\r\\n]"), Pattern("\\s?\\p{L}+"), Pattern("\\s?\\p{P}+"), Pattern(kDeepseekCjk),
        Pattern("\\p{N}")}},
  };
  return *specs;
}

struct Step {
  std::optional<PreTokenizerRegex> regex;
  CustomSplitter custom;
};

// Every chain compiled, indexed by kind. The patterns are constants, so one that does not
// compile is a bug here: it stops the program with the compiler's message.
const std::vector<std::vector<Step>>& Chains() {
  static const auto* chains = [] {
    auto* all = new std::vector<std::vector<Step>>();
    for (const ChainSpec& spec : ChainSpecs()) {
      const size_t index = static_cast<size_t>(spec.kind);
      if (all->size() <= index) all->resize(index + 1);
      for (const StepSpec& s : spec.steps) {
        Step& step = (*all)[index].emplace_back();
        step.custom = s.custom;
        if (s.pattern == nullptr) continue;
        absl::StatusOr<PreTokenizerRegex> re = PreTokenizerRegex::Compile(s.pattern);
        if (!re.ok()) {
          std::fprintf(stderr, "tensorgrid: built-in %s\n", re.status().ToString().c_str());
          std::abort();
        }
        step.regex = std::move(*re);
      }
    }
    return all;
  }();
  return *chains;
}

struct PreTokenizerName {
  absl::string_view name;
  BpePreTokenizer kind;
};

// llama.cpp groups these names under one pre-tokenizer type each (llama_vocab::impl::load),
// except "gpt2": an alias of ours that llama.cpp refuses.
constexpr PreTokenizerName kPreTokenizerNames[] = {
    {"default", BpePreTokenizer::kDefault},
    {"gpt-2", BpePreTokenizer::kGpt2},
    {"gpt2", BpePreTokenizer::kGpt2},
    {"mpt", BpePreTokenizer::kGpt2},
    {"olmo", BpePreTokenizer::kGpt2},
    {"llama3", BpePreTokenizer::kLlama3},
    {"llama-v3", BpePreTokenizer::kLlama3},
    {"llama-bpe", BpePreTokenizer::kLlama3},
    {"falcon3", BpePreTokenizer::kLlama3},
    {"falcon-h1", BpePreTokenizer::kLlama3},
    {"pixtral", BpePreTokenizer::kLlama3},
    {"qwen2", BpePreTokenizer::kQwen2},
    {"deepseek-r1-qwen", BpePreTokenizer::kQwen2},
    {"qwen35", BpePreTokenizer::kQwen35},
    {"gpt-4o", BpePreTokenizer::kGpt4o},
    {"llama4", BpePreTokenizer::kGpt4o},
    {"kanana2", BpePreTokenizer::kGpt4o},
    {"talkie", BpePreTokenizer::kGpt4o},
    {"minimax-m2", BpePreTokenizer::kGpt4o},
    {"falcon", BpePreTokenizer::kFalcon},
    {"starcoder", BpePreTokenizer::kStarcoder},
    {"refact", BpePreTokenizer::kStarcoder},
    {"command-r", BpePreTokenizer::kStarcoder},
    {"smollm", BpePreTokenizer::kStarcoder},
    {"codeshell", BpePreTokenizer::kStarcoder},
    {"exaone", BpePreTokenizer::kStarcoder},
    {"minerva-7b", BpePreTokenizer::kStarcoder},
    {"mellum2", BpePreTokenizer::kStarcoder},
    {"deepseek-llm", BpePreTokenizer::kDeepseekLlm},
    {"deepseek-coder", BpePreTokenizer::kDeepseekCoder},
    {"gemma4", BpePreTokenizer::kGemma4},
};

}  // namespace

std::vector<std::string> BpePreTokenizerNames() {
  std::vector<std::string> names;
  for (const PreTokenizerName& n : kPreTokenizerNames) names.emplace_back(n.name);
  return names;
}

absl::StatusOr<BpePreTokenizer> ParseBpePreTokenizer(absl::string_view name) {
  for (const PreTokenizerName& n : kPreTokenizerNames) {
    if (n.name == name) return n.kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(kPreKey, ": unsupported pre-tokenizer \"", name,
                   "\" (supported: ", absl::StrJoin(BpePreTokenizerNames(), ", "), ")"));
}

std::vector<size_t> PreTokenizeLengths(BpePreTokenizer kind, absl::Span<const uint32_t> cpts) {
  std::vector<size_t> pieces = {cpts.size()};
  if (cpts.empty()) return {};
  for (const Step& step : Chains()[static_cast<size_t>(kind)]) {
    pieces = step.regex ? step.regex->Split(cpts, pieces) : SplitCustom(step.custom, cpts, pieces);
  }
  return pieces;
}

std::vector<std::string> PreTokenize(BpePreTokenizer kind, absl::string_view text) {
  const std::vector<uint32_t> cpts = DecodeUtf8Lenient(text);
  std::vector<std::string> words;
  size_t start = 0;
  for (size_t len : PreTokenizeLengths(kind, cpts)) {
    std::string& word = words.emplace_back();
    for (size_t i = start; i < start + len; ++i) AppendUtf8(cpts[i], &word);
    start += len;
  }
  return words;
}

}  // namespace tg
