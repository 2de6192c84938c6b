// Tokenizer factory and what SPM and BPE share: reading tokenizer.ggml.* into a Vocab with
// llama.cpp's defaults and special-token detection (llama_vocab::impl::load), cutting
// user-defined tokens out of the input (tokenizer_st_partition), and Decode.
#include "models/tokenizer.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "models/token_type.h"
#include "models/tokenizer_bpe.h"
#include "models/tokenizer_spm.h"

namespace tg {
namespace tokenizer_internal {
namespace {

constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kScoresKey[] = "tokenizer.ggml.scores";
constexpr char kTokenTypeKey[] = "tokenizer.ggml.token_type";

// Token texts llama.cpp treats as special although the file may not mark them: the first
// match of each group becomes that special id (unless its key is set) and a control token.
struct TextGroup {
  const char* key;  // the GGUF key that, when present, names the id instead.
  std::vector<absl::string_view> texts;
};

const std::vector<TextGroup>& DetectedGroups() {
  static const auto* groups = new std::vector<TextGroup>{
      {"tokenizer.ggml.eot_token_id",
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}},
      {"tokenizer.ggml.eom_token_id", {"<|eom_id|>"}},
      {"tokenizer.ggml.fim_pre_token_id",
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
        "<|code_prefix|>", "<|prefix|>"}},
      {"tokenizer.ggml.fim_suf_token_id",
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
        "<|code_suffix|>", "<|suffix|>"}},
      {"tokenizer.ggml.fim_mid_token_id",
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
        "<|code_middle|>", "<|middle|>"}},
      {"tokenizer.ggml.fim_pad_token_id",
       {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
      {"tokenizer.ggml.fim_rep_token_id",
       {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {"tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"}},
  };
  return *groups;
}
// Indices into DetectedGroups(), in its order.
enum DetectedGroup { kEot, kEom, kFimPre, kFimSuf, kFimMid, kFimPad, kFimRep, kFimSep };

// Texts that end generation; every match also becomes a control token.
constexpr absl::string_view kEogTexts[] = {"<|eot_id|>",
                                           "<|im_end|>",
                                           "<|end|>",
                                           "<|return|>",
                                           "<|call|>",
                                           "<|flush|>",
                                           "<|calls|>",
                                           "<end_of_turn>",
                                           "<|endoftext|>",
                                           "</s>",
                                           "<|eom_id|>",
                                           "<EOT>",
                                           "_<EOT>",
                                           "[EOT]",
                                           "[EOS]",
                                           "<|end_of_text|>",
                                           "<end_of_utterance>",
                                           "<eos>",
                                           "<turn|>",
                                           "<|tool_response>",
                                           "<｜end▁of▁sentence｜>"};

uint32_t AttrFromType(int32_t type) {
  switch (type) {
    case kTokenTypeNormal:
      return kAttrNormal;
    case kTokenTypeUnknown:
      return kAttrUnknown;
    case kTokenTypeControl:
      return kAttrControl;
    case kTokenTypeUserDefined:
      return kAttrUserDefined;
    case kTokenTypeUnused:
      return kAttrUnused;
    case kTokenTypeByte:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

// Texts, scores and attributes; every token must be unique, as llama.cpp asserts.
absl::Status LoadTokens(const GgufFile& file, Vocab* v) {
  TG_ASSIGN_OR_RETURN(v->tokens, file.GetStringArray(kTokensKey));
  const size_t n = v->tokens.size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(kTokensKey, ": ", n, " tokens"));
  }
  v->scores.assign(n, 0.0f);
  if (file.Has(kScoresKey)) {
    TG_ASSIGN_OR_RETURN(std::vector<float> scores, file.GetF32Array(kScoresKey));
    if (scores.size() < n) {
      return absl::InvalidArgumentError(
          absl::StrCat(kScoresKey, ": ", scores.size(), " scores for ", n, " tokens"));
    }
    std::copy_n(scores.begin(), n, v->scores.begin());
  }
  v->attrs.assign(n, kAttrNormal);
  if (file.Has(kTokenTypeKey)) {
    TG_ASSIGN_OR_RETURN(std::vector<int32_t> types, file.GetI32Array(kTokenTypeKey));
    if (types.size() < n) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTokenTypeKey, ": ", types.size(), " types for ", n, " tokens"));
    }
    for (size_t i = 0; i < n; ++i) v->attrs[i] = AttrFromType(types[i]);
  }
  v->ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    // llama.cpp renames empty tokens so that they stay unique and printable.
    if (v->tokens[i].empty()) v->tokens[i] = absl::StrCat("[EMPTY_", i, "]");
    if (!v->ids.try_emplace(v->tokens[i], static_cast<int32_t>(i)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTokensKey, ": token ", i, " \"", v->tokens[i], "\" appears twice"));
    }
  }
  return absl::OkStatus();
}

// An id from `key` when present and inside the vocabulary; otherwise `fallback` (llama.cpp
// warns and keeps its default for an out-of-range id).
int32_t ReadId(const GgufFile& file, absl::string_view key, int32_t fallback, size_t n) {
  if (fallback >= static_cast<int64_t>(n)) fallback = -1;
  absl::StatusOr<int64_t> id = file.GetI64(key);
  if (!id.ok() || *id < 0 || *id >= static_cast<int64_t>(n)) return fallback;
  return static_cast<int32_t>(*id);
}

absl::StatusOr<bool> ReadFlag(const GgufFile& file, absl::string_view key, bool fallback) {
  if (!file.Has(key)) return fallback;
  return file.GetBool(key);
}

// llama.cpp's text-based special-token detection: eot/eom/fim ids by text when their keys
// are absent, the end-of-generation set, and the control attribute for all of them.
void DetectSpecialTokens(const GgufFile& file, Vocab* v) {
  const size_t n = v->tokens.size();
  const std::vector<TextGroup>& groups = DetectedGroups();
  std::vector<int32_t> group_ids(groups.size(), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    group_ids[g] = ReadId(file, groups[g].key, -1, n);
    if (group_ids[g] >= 0) continue;
    for (size_t id = 0; id < n && group_ids[g] < 0; ++id) {
      const auto& texts = groups[g].texts;
      if (std::find(texts.begin(), texts.end(), v->tokens[id]) == texts.end()) continue;
      group_ids[g] = static_cast<int32_t>(id);
      v->attrs[id] |= kAttrControl;
    }
  }
  v->eot = group_ids[kEot];
  v->eom = group_ids[kEom];
  for (size_t id = 0; id < n; ++id) {
    if (std::find(std::begin(kEogTexts), std::end(kEogTexts), v->tokens[id]) ==
        std::end(kEogTexts)) {
      continue;
    }
    v->eog.insert(static_cast<int32_t>(id));
    v->attrs[id] |= kAttrControl;
  }
  for (int32_t id :
       {group_ids[kFimPad], group_ids[kFimRep], group_ids[kFimSep], v->eos, v->eot, v->eom}) {
    if (id >= 0) v->eog.insert(id);
  }
}

}  // namespace

int32_t Vocab::Find(absl::string_view text) const {
  auto it = ids.find(text);
  return it == ids.end() ? -1 : it->second;
}

absl::StatusOr<Vocab> LoadVocab(const GgufFile& file, const VocabDefaults& defaults) {
  Vocab v;
  TG_RETURN_IF_ERROR(LoadTokens(file, &v));
  const size_t n = v.tokens.size();
  v.bos = ReadId(file, "tokenizer.ggml.bos_token_id", defaults.bos, n);
  v.eos = ReadId(file, "tokenizer.ggml.eos_token_id", defaults.eos, n);
  v.unk = ReadId(file, "tokenizer.ggml.unknown_token_id", defaults.unk, n);
  TG_ASSIGN_OR_RETURN(v.add_bos, ReadFlag(file, "tokenizer.ggml.add_bos_token", defaults.add_bos));
  TG_ASSIGN_OR_RETURN(v.add_eos, ReadFlag(file, "tokenizer.ggml.add_eos_token", defaults.add_eos));
  TG_ASSIGN_OR_RETURN(v.add_space_prefix,
                      ReadFlag(file, "tokenizer.ggml.add_space_prefix", defaults.add_space_prefix));
  if (v.add_bos && v.bos < 0) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_bos_token: true but the vocabulary has no BOS token");
  }
  if (v.add_eos && v.eos < 0) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_eos_token: true but the vocabulary has no EOS token");
  }
  DetectSpecialTokens(file, &v);
  for (size_t id = 0; id < n; ++id) {
    // Control and unknown tokens are matched only with parse_special (Vocab::special).
    if (v.attrs[id] & kAttrUserDefined && !(v.attrs[id] & (kAttrControl | kAttrUnknown))) {
      v.user_defined.push_back(static_cast<int32_t>(id));
    }
  }
  for (size_t id = 0; id < n; ++id) {
    if (v.attrs[id] & (kAttrUserDefined | kAttrControl) && !v.tokens[id].empty()) {
      v.special.push_back(static_cast<int32_t>(id));
    }
  }
  for (std::vector<int32_t>* list : {&v.user_defined, &v.special}) {
    std::stable_sort(list->begin(), list->end(), [&v](int32_t a, int32_t b) {
      return v.tokens[a].size() > v.tokens[b].size();
    });
  }
  return v;
}

std::vector<Fragment> Partition(const Vocab& vocab, absl::string_view text, bool parse_special) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, text});
  for (int32_t id : parse_special ? vocab.special : vocab.user_defined) {
    const std::string& needle = vocab.tokens[id];
    std::vector<Fragment> next;
    next.reserve(fragments.size());
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      absl::string_view rest = f.text;
      for (size_t pos; (pos = rest.find(needle)) != absl::string_view::npos;) {
        if (pos > 0) next.push_back({-1, rest.substr(0, pos)});
        next.push_back({id, {}});
        rest.remove_prefix(pos + needle.size());
      }
      if (!rest.empty()) next.push_back({-1, rest});
    }
    fragments = std::move(next);
  }
  return fragments;
}

}  // namespace tokenizer_internal

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  TG_ASSIGN_OR_RETURN(std::string model, file.GetString(tokenizer_internal::kModelKey));
  if (model == "llama") return SpmTokenizer::Create(file);
  if (model == "gpt2" || model == "gemma4") return BpeTokenizer::Create(file);
  // What llama.cpp's other tokenizer models are, so that the refusal says what is missing.
  static constexpr std::pair<absl::string_view, absl::string_view> kKnownModels[] = {
      {"bert", " (WordPiece)"}, {"t5", " (Unigram)"},    {"rwkv", " (RWKV trie)"},
      {"plamo2", " (PLaMo-2)"}, {"no_vocab", " (none)"}, {"none", " (none)"}};
  absl::string_view kind;
  for (const auto& [name, what] : kKnownModels) {
    if (name == model) kind = what;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(tokenizer_internal::kModelKey, ": unsupported tokenizer \"", model, "\"", kind,
                   " (supported: \"llama\" = SPM, \"gpt2\" = BPE, \"gemma4\" = SPM-style BPE)"));
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids) const {
  using tokenizer_internal::kAttrControl;
  using tokenizer_internal::kAttrUserDefined;
  std::string text;
  // Encode puts the SPM space prefix before every text fragment: at the start and after
  // each user-defined token.
  bool strip_space = vocab_.add_space_prefix;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab() || vocab_.Has(id, kAttrControl)) continue;
    std::string piece = TokenToPiece(id);
    if (vocab_.Has(id, kAttrUserDefined)) {
      text += piece;
      strip_space = vocab_.add_space_prefix;
      continue;
    }
    absl::string_view p = piece;
    if (strip_space && !p.empty() && p.front() == ' ') p.remove_prefix(1);
    if (!piece.empty()) strip_space = false;
    text.append(p.data(), p.size());
  }
  return text;
}

}  // namespace tg
