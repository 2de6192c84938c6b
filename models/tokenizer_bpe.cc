// Byte-level BPE tokenizer; see tokenizer_bpe.h. The words come from models/pre_tokenizer.h.
#include "models/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/status_macros.h"
#include "models/unicode.h"

namespace tg {
namespace {

using tokenizer_internal::kAttrByte;
using tokenizer_internal::kAttrControl;
using tokenizer_internal::kAttrNormal;
using tokenizer_internal::kAttrUnknown;
using tokenizer_internal::kAttrUserDefined;
using tokenizer_internal::Vocab;

constexpr char kPreKey[] = "tokenizer.ggml.pre";
constexpr char kMergesKey[] = "tokenizer.ggml.merges";
// llama.cpp's BPE defaults: id 11 for BOS and EOS (GPT-2's), no BOS except for llama3.
constexpr int32_t kBpeDefaultSpecialId = 11;
constexpr size_t kByteTokenLength = 6;  // "<0xXX>".
constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kEscapedSpace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's space.

}  // namespace

BpeTokenizer::BpeTokenizer(Vocab vocab, BpePreTokenizer pre, bool ignore_merges)
    : Tokenizer(std::move(vocab)), pre_(pre), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &byte_chars_[b]);
    byte_char_ids_[b] = this->vocab().Find(byte_chars_[b]);
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::Create(const GgufFile& file) {
  BpePreTokenizer pre = BpePreTokenizer::kDefault;
  TG_ASSIGN_OR_RETURN(std::string model, file.GetString(kModelKey));
  // As llama.cpp: the gemma4 model has its own pre-tokenizer whatever the key says, and no
  // default special tokens.
  const bool gemma4_model = model == "gemma4";
  if (gemma4_model) {
    pre = BpePreTokenizer::kGemma4;
  } else if (file.Has(kPreKey)) {
    TG_ASSIGN_OR_RETURN(std::string name, file.GetString(kPreKey));
    TG_ASSIGN_OR_RETURN(pre, ParseBpePreTokenizer(name));
  }
  // llama3 vocabularies add BOS and take whole-word tokens as they are (ignore_merges).
  const bool llama3 = pre == BpePreTokenizer::kLlama3;
  tokenizer_internal::VocabDefaults defaults;
  defaults.bos = defaults.eos = gemma4_model ? -1 : kBpeDefaultSpecialId;
  defaults.add_bos = llama3;
  TG_ASSIGN_OR_RETURN(Vocab vocab, tokenizer_internal::LoadVocab(file, defaults));
  // As llama.cpp: gemma4 always adds BOS, whatever tokenizer.ggml.add_bos_token says.
  if (pre == BpePreTokenizer::kGemma4 && !vocab.add_bos) {
    if (vocab.bos < 0) {
      return absl::InvalidArgumentError(
          "tokenizer.ggml.bos_token_id: missing, and the gemma4 tokenizer always adds BOS");
    }
    vocab.add_bos = true;
  }
  if (!file.Has(kMergesKey)) {
    return absl::InvalidArgumentError(absl::StrCat(kMergesKey, ": missing (a BPE vocabulary)"));
  }
  TG_ASSIGN_OR_RETURN(std::vector<std::string> merges, file.GetStringArray(kMergesKey));
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer(std::move(vocab), pre, llama3));
  TG_RETURN_IF_ERROR(tok->LoadMerges(merges));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

namespace {

uint64_t IdPairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Unambiguous key for a pair of texts: the left length, a separator, then both texts.
std::string TextMergeKey(absl::string_view left, absl::string_view right) {
  return absl::StrCat(left.size(), ":", left, right);
}

}  // namespace

absl::Status BpeTokenizer::LoadMerges(const std::vector<std::string>& merges) {
  const Vocab& v = vocab();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const absl::string_view merge = merges[rank];
    // As llama.cpp: the halves split at the first space after the first byte; a merge without
    // one pairs two empty strings, which never match.
    const size_t split = merge.size() > 1 ? merge.find(' ', 1) : absl::string_view::npos;
    if (split == absl::string_view::npos) continue;
    const absl::string_view left = merge.substr(0, split);
    const absl::string_view right = merge.substr(split + 1);
    const Merge m = {static_cast<int32_t>(rank), v.Find(absl::StrCat(left, right))};
    const int32_t left_id = v.Find(left);
    const int32_t right_id = v.Find(right);
    // The first rank of a repeated pair wins (llama.cpp's bpe_ranks.emplace).
    if (left_id >= 0 && right_id >= 0) {
      id_merges_.try_emplace(IdPairKey(left_id, right_id), m);
    } else {
      text_merges_.try_emplace(TextMergeKey(left, right), m);
    }
  }
  if (merges.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(kMergesKey, ": too many merges"));
  }
  return absl::OkStatus();
}

const BpeTokenizer::Merge* BpeTokenizer::FindMerge(absl::string_view left, int32_t left_id,
                                                   absl::string_view right,
                                                   int32_t right_id) const {
  if (left_id >= 0 && right_id >= 0) {
    auto it = id_merges_.find(IdPairKey(left_id, right_id));
    return it == id_merges_.end() ? nullptr : &it->second;
  }
  if (text_merges_.empty()) return nullptr;
  auto it = text_merges_.find(TextMergeKey(left, right));
  return it == text_merges_.end() ? nullptr : &it->second;
}

namespace {

// A run of the word's byte-level text, linked to its neighbours; n == 0 once merged away.
struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t n;
  int32_t id;  // the token this text is, or -1.
};

struct Bigram {
  int left;
  int right;
  int32_t rank;
  int32_t result;
  size_t left_n;  // the symbols' sizes when queued: a change means the pair is stale.
  size_t right_n;
};

// Lowest rank first; equal ranks: leftmost first (llm_bigram_bpe::comparator).
struct BigramOrder {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

}  // namespace

void BpeTokenizer::EncodeWord(absl::string_view word, std::vector<int32_t>* out) const {
  const Vocab& v = vocab();
  std::string text;  // the byte-level characters of `word`, or `word` itself when raw.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  if (raw_utf8()) {
    // One symbol per UTF-8 character. A word of newlines that is a token is taken whole.
    text = std::string(word);
    if (word.find_first_not_of('\n') == absl::string_view::npos) {
      if (const int32_t id = v.Find(text); id >= 0) {
        out->push_back(id);
        return;
      }
    }
    for (size_t i = 0; i < word.size();) {
      const size_t n = std::min(word.size() - i, Utf8SequenceLength(word[i]));
      const int index = static_cast<int>(symbols.size());
      symbols.push_back(
          {index - 1, i + n == word.size() ? -1 : index + 1, i, n, v.Find(word.substr(i, n))});
      i += n;
    }
  } else {
    for (size_t i = 0; i < word.size(); ++i) {
      const uint8_t b = static_cast<uint8_t>(word[i]);
      const int index = static_cast<int>(i);
      symbols.push_back({index - 1, i + 1 == word.size() ? -1 : index + 1, text.size(),
                         byte_chars_[b].size(), byte_char_ids_[b]});
      text += byte_chars_[b];
    }
  }
  if (ignore_merges_) {
    if (const int32_t id = v.Find(text); id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const Merge* m = FindMerge(absl::string_view(text).substr(l.start, l.n), l.id,
                               absl::string_view(text).substr(r.start, r.n), r.id);
    if (m != nullptr) queue.push({left, right, m->rank, m->result, l.n, r.n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);
  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.n == 0 || right.n == 0 || left.n != bigram.left_n || right.n != bigram.right_n) {
      continue;
    }
    left.n += right.n;
    left.id = bigram.result;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    if (symbols[i].id >= 0) {
      out->push_back(symbols[i].id);
      continue;
    }
    // As llama.cpp: a symbol that is no token falls back to tokens of its single bytes,
    // which byte-level vocabularies rarely have, so it usually vanishes; raw UTF-8 ones
    // have <0xXX> byte tokens.
    for (char c : absl::string_view(text).substr(symbols[i].start, symbols[i].n)) {
      const std::string byte_text =
          raw_utf8() ? absl::StrFormat("<0x%02X>", static_cast<uint8_t>(c)) : std::string(1, c);
      if (const int32_t id = v.Find(byte_text); id >= 0) out->push_back(id);
    }
  }
}

std::vector<int32_t> BpeTokenizer::EncodeText(absl::string_view text, bool add_special,
                                              bool parse_special) const {
  const Vocab& v = vocab();
  std::vector<int32_t> out;
  if (add_special && v.add_bos) out.push_back(v.bos);
  std::string word;
  for (const tokenizer_internal::Fragment& f :
       tokenizer_internal::Partition(v, text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    // SentencePiece-style vocabularies see spaces as U+2581.
    const std::string escaped =
        raw_utf8() ? absl::StrReplaceAll(f.text, {{" ", kEscapedSpace}}) : "";
    const std::vector<uint32_t> cpts =
        DecodeUtf8Lenient(raw_utf8() ? absl::string_view(escaped) : f.text);
    size_t start = 0;
    for (size_t len : PreTokenizeLengths(pre_, cpts)) {
      word.clear();
      for (size_t i = start; i < start + len; ++i) AppendUtf8(cpts[i], &word);
      EncodeWord(word, &out);
      start += len;
    }
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string BpeTokenizer::TokenToPiece(int32_t id) const {
  const Vocab& v = vocab();
  if (id < 0 || id >= n_vocab()) return "";
  const std::string& text = v.tokens[id];
  if (v.Has(id, kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
  if (v.Has(id, kAttrNormal) && raw_utf8()) {
    return absl::StrReplaceAll(text, {{kEscapedSpace, " "}});
  }
  if (v.Has(id, kAttrNormal)) {
    // Byte-level characters back to bytes; llama.cpp marks a character outside the 256.
    std::string bytes;
    for (uint32_t cpt : DecodeUtf8Lenient(text)) {
      if (const int b = UnicodeToByte(cpt); b >= 0) {
        bytes.push_back(static_cast<char>(b));
        continue;
      }
      std::string utf8;
      AppendUtf8(cpt, &utf8);
      absl::StrAppend(&bytes, "[UNK_BYTE_0x");
      for (char c : utf8) absl::StrAppendFormat(&bytes, "%02x", static_cast<uint8_t>(c));
      absl::StrAppend(&bytes, text, "]");
    }
    return bytes;
  }
  if (v.Has(id, kAttrByte)) {
    unsigned byte = 0;
    if (text.size() == kByteTokenLength && std::sscanf(text.c_str(), "<0x%2x>", &byte) == 1) {
      return std::string(1, static_cast<char>(byte));
    }
    return "";
  }
  return "";  // unused and undefined tokens render as nothing, as in llama.cpp.
}

}  // namespace tg
