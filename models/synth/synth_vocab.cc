// Builds the synthetic SPM vocabulary (see synth_vocab.h).
#include "models/synth/synth_vocab.h"

#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "models/unicode.h"

namespace tg::synth {
namespace {

constexpr char kSpace[] = "\xE2\x96\x81";  // "▁" (U+2581): SentencePiece's word-start marker.
constexpr int kAlphabet = 26;

// Frequent English words first, so that short texts tokenize into a few real pieces.
constexpr const char* kWords[] = {
    "the",  "and",   "a",      "to",    "was",  "he",   "she",  "it",     "of",   "in",
    "that", "you",   "they",   "his",   "her",  "with", "on",   "for",    "said", "is",
    "had",  "one",   "day",    "there", "once", "upon", "time", "little", "girl", "boy",
    "big",  "happy", "play",   "named", "lily", "tom",  "ben",  "mom",    "dad",  "friend",
    "saw",  "very",  "wanted", "went",  "but",  "not",  "so",   "were",   "we",   "at",
    "be",   "have",  "this",   "from",  "or",   "by",   "all",  "can",    "do",   "out",
    "up",   "what",  "when",   "go",    "are",  "my",   "no",   "see",    "come", "like",
    "sun",  "tree",  "dog",    "cat",   "ball", "park", "home", "good",   "love", "help"};

// The letter sequence with index `i` among all sequences of `len` lowercase letters.
std::string Letters(uint64_t i, int len) {
  std::string s(len, 'a');
  for (int p = len - 1; p >= 0; --p) {
    s[p] = static_cast<char>('a' + i % kAlphabet);
    i /= kAlphabet;
  }
  return s;
}

// Appends pieces in order until `n` are collected, skipping duplicates.
class PieceCollector {
 public:
  explicit PieceCollector(size_t n) : n_(n) { pieces_.reserve(n); }
  bool full() const { return pieces_.size() >= n_; }
  void Add(std::string piece) {
    if (!full() && seen_.insert(piece).second) pieces_.push_back(std::move(piece));
  }
  std::vector<std::string>& pieces() { return pieces_; }

 private:
  size_t n_;
  absl::flat_hash_set<std::string> seen_;
  std::vector<std::string> pieces_;
};

std::vector<std::string> MakePieces(size_t n) {
  PieceCollector c(n);
  c.Add(kSpace);
  for (const char* w : kWords) c.Add(absl::StrCat(kSpace, w));
  for (const char* p : {".", ",", "!", "?", "'", "\""}) c.Add(p);
  // Then every letter sequence of length 1, 2, 3, ... with and without the word marker:
  // unbounded, so any n_vocab can be filled.
  for (int len = 1; !c.full(); ++len) {
    uint64_t count = 1;
    for (int i = 0; i < len; ++i) count *= kAlphabet;
    for (uint64_t i = 0; i < count && !c.full(); ++i) {
      const std::string s = Letters(i, len);
      c.Add(s);
      c.Add(absl::StrCat(kSpace, s));
    }
  }
  return std::move(c.pieces());
}

// GPT-2's byte-level text of `raw` (a space becomes "Ġ").
std::string ByteLevel(absl::string_view raw) {
  std::string out;
  for (char c : raw) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

// Adds `word`'s prefixes as merged tokens: each the merge of the prefix before it and one more
// byte-level character, so that BPE rebuilds the whole word. Stops when `v` holds n tokens.
void AddWordMerges(absl::string_view word, size_t n, absl::flat_hash_set<std::string>* seen,
                   BpeVocab* v) {
  std::string prefix = ByteLevel(word.substr(0, 1));
  for (size_t i = 1; i < word.size() && v->tokens.size() < n; ++i) {
    const std::string next = ByteLevel(word.substr(i, 1));
    if (seen->insert(prefix + next).second) {
      v->merges.push_back(absl::StrCat(prefix, " ", next));
      v->tokens.push_back(prefix + next);
      v->types.push_back(kTokenTypeNormal);
    }
    prefix += next;
  }
}

}  // namespace

BpeVocab MakeBpeVocab(int64_t n_vocab) {
  constexpr int kBytes = 256;
  constexpr int kSpecials = 2;  // <|startoftext|>, <|endoftext|>.
  const size_t n_normal = static_cast<size_t>(n_vocab) - kSpecials;
  BpeVocab v;
  absl::flat_hash_set<std::string> seen;
  for (int b = 0; b < kBytes; ++b) {
    v.tokens.push_back(ByteLevel(std::string(1, static_cast<char>(b))));
    v.types.push_back(kTokenTypeNormal);
    seen.insert(v.tokens.back());
  }
  for (const char* w : kWords) {
    std::string capitalized = w;
    capitalized[0] = absl::ascii_toupper(capitalized[0]);
    AddWordMerges(absl::StrCat(" ", w), n_normal, &seen, &v);
    AddWordMerges(capitalized, n_normal, &seen, &v);
  }
  // Filler no merge produces (gpt-4o's BPE does not take whole words from the vocabulary).
  for (uint64_t i = 0; v.tokens.size() < n_normal; ++i) {
    std::string filler = absl::StrCat(ByteLevel(" "), "x", Letters(i, 4));
    if (seen.insert(filler).second) {
      v.tokens.push_back(std::move(filler));
      v.types.push_back(kTokenTypeNormal);
    }
  }
  v.bos = static_cast<uint32_t>(v.tokens.size());
  v.eos = v.bos + 1;
  for (const char* special : {"<|startoftext|>", "<|endoftext|>"}) {
    v.tokens.push_back(special);
    v.types.push_back(kTokenTypeControl);
  }
  return v;
}

SpmVocab MakeSpmVocab(int64_t n_vocab) {
  constexpr int kBytes = 256;
  SpmVocab v;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {kTokenTypeUnknown, kTokenTypeControl, kTokenTypeControl};
  for (int b = 0; b < kBytes; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.tokens.push_back(name);
    v.types.push_back(kTokenTypeByte);
  }
  v.scores.assign(v.tokens.size(), 0.0f);  // as in llama 2: special and byte tokens score 0.
  const size_t n_pieces = static_cast<size_t>(n_vocab) - v.tokens.size();
  std::vector<std::string> pieces = MakePieces(n_pieces);
  for (size_t i = 0; i < pieces.size(); ++i) {
    v.tokens.push_back(std::move(pieces[i]));
    v.scores.push_back(-static_cast<float>(i + 1));  // earlier pieces merge first.
    v.types.push_back(kTokenTypeNormal);
  }
  return v;
}

}  // namespace tg::synth
