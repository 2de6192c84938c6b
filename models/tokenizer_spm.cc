// SPM tokenizer; see tokenizer_spm.h. The merge loop is llama.cpp's llm_tokenizer_spm_session
// step for step (same queue order, same staleness test), so ties and odd vocabularies give
// the same ids.
#include "models/tokenizer_spm.h"

#include <cstdio>
#include <queue>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/status_macros.h"
#include "models/unicode.h"

namespace tg {
namespace {

using tokenizer_internal::Vocab;

constexpr char kSpaceEscape[] = "\xE2\x96\x81";  // "▁" U+2581, SentencePiece's space.
constexpr size_t kByteTokenLength = 6;           // "<0xXX>".

// llama.cpp's SPM defaults: BOS 1, EOS 2, UNK 0, BOS added, a space put before the text.
constexpr tokenizer_internal::VocabDefaults kSpmDefaults = {
    .bos = 1, .eos = 2, .unk = 0, .add_bos = true, .add_eos = false, .add_space_prefix = true};

// A run of bytes of the fragment, linked to its neighbours; n == 0 once merged away.
struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t n;
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

// Highest score first; equal scores: leftmost first (llm_bigram_spm::comparator).
struct BigramOrder {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

using BigramQueue = std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder>;

std::vector<Symbol> SplitCharacters(absl::string_view text) {
  std::vector<Symbol> symbols;
  for (size_t offs = 0; offs < text.size();) {
    const size_t n = std::min(Utf8SequenceLength(text[offs]), text.size() - offs);
    const int index = static_cast<int>(symbols.size());
    offs += n;
    symbols.push_back({index - 1, offs == text.size() ? -1 : index + 1, offs - n, n});
  }
  return symbols;
}

void TryAddBigram(const Vocab& vocab, absl::string_view text, const std::vector<Symbol>& symbols,
                  int left, int right, BigramQueue* queue) {
  if (left == -1 || right == -1) return;
  const size_t size = symbols[left].n + symbols[right].n;
  const int32_t token = vocab.Find(text.substr(symbols[left].start, size));
  if (token < 0) return;
  queue->push({left, right, vocab.scores[token], size});
}

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {
  for (int b = 0; b < 256; ++b) {
    int32_t id = this->vocab().Find(absl::StrFormat("<0x%02X>", b));
    if (id < 0) id = this->vocab().Find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id;
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> SpmTokenizer::Create(const GgufFile& file) {
  TG_ASSIGN_OR_RETURN(Vocab vocab, tokenizer_internal::LoadVocab(file, kSpmDefaults));
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(vocab)));
}

std::vector<int32_t> SpmTokenizer::EncodeText(absl::string_view text, bool add_special,
                                              bool parse_special) const {
  const Vocab& v = vocab();
  std::vector<int32_t> out;
  if (add_special && v.add_bos) out.push_back(v.bos);
  // Like SentencePiece, a space goes before the text and before text that follows a token.
  bool prev_special = true;
  for (const tokenizer_internal::Fragment& f :
       tokenizer_internal::Partition(v, text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string spaced =
        (v.add_space_prefix && prev_special) ? absl::StrCat(" ", f.text) : std::string(f.text);
    EncodeFragment(absl::StrReplaceAll(spaced, {{" ", kSpaceEscape}}), &out);
    prev_special = false;
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

void SpmTokenizer::EncodeFragment(absl::string_view text, std::vector<int32_t>* out) const {
  const Vocab& v = vocab();
  std::vector<Symbol> symbols = SplitCharacters(text);
  if (symbols.empty()) return;
  BigramQueue queue;
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) {
    TryAddBigram(v, text, symbols, i - 1, i, &queue);
  }
  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: one side already merged into something else.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    TryAddBigram(v, text, symbols, left.prev, bigram.left, &queue);
    TryAddBigram(v, text, symbols, bigram.left, left.next, &queue);
  }
  for (int i = 0; i != -1; i = symbols[i].next) {
    const absl::string_view piece = text.substr(symbols[i].start, symbols[i].n);
    const int32_t token = v.Find(piece);
    if (token >= 0) {
      out->push_back(token);
    } else {
      AppendBytes(piece, out);
    }
  }
}

void SpmTokenizer::AppendBytes(absl::string_view symbol, std::vector<int32_t>* out) const {
  for (char c : symbol) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(c)];
    // llama.cpp throws when a byte has no token; unk (if any) is the graceful equivalent.
    if (id >= 0) {
      out->push_back(id);
    } else if (vocab().unk >= 0) {
      out->push_back(vocab().unk);
    }
  }
}

std::string SpmTokenizer::TokenToPiece(int32_t id) const {
  const Vocab& v = vocab();
  if (id < 0 || id >= n_vocab()) return "";
  const std::string& text = v.tokens[id];
  if (v.Has(id, tokenizer_internal::kAttrUnknown | tokenizer_internal::kAttrControl |
                    tokenizer_internal::kAttrUserDefined))
    return text;
  if (v.Has(id, tokenizer_internal::kAttrNormal))
    return absl::StrReplaceAll(text, {{kSpaceEscape, " "}});
  if (v.Has(id, tokenizer_internal::kAttrByte)) {
    unsigned byte = 0;
    if (text.size() == kByteTokenLength && std::sscanf(text.c_str(), "<0x%2x>", &byte) == 1) {
      return std::string(1, static_cast<char>(byte));
    }
    // A byte token that is not "<0xXX>" (the raw-byte fallback) stands for itself.
    return text;
  }
  return "";  // unused and undefined tokens render as nothing, as in llama.cpp.
}

}  // namespace tg
