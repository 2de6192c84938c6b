// Byte-level BPE tokenizer and its pre-tokenizers; see tokenizer_bpe.h. The splitters are
// transcriptions of llama.cpp's unicode_regex_split_custom_{gpt2,llama3,qwen2} (and of what
// its std::regex fallback does for the "default" chain and for gpt-4o), quirks included:
// tokenization must give llama.cpp's ids, not what a textbook regex engine would.
#include "models/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

// ---- Pre-tokenizer -------------------------------------------------------------------------

// What the splitters ask about a codepoint. Positions outside the piece being split have no
// bits at all (llama.cpp's empty unicode_cpt_flags), which is what kValid tells apart.
enum CpProps : uint8_t {
  kValid = 1 << 0,
  kLetter = 1 << 1,
  kNumber = 1 << 2,
  kSpace = 1 << 3,        // \s
  kPunctuation = 1 << 4,  // \p{P}
};
constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

struct CpText {
  std::vector<uint32_t> cpts;
  std::vector<uint8_t> props;
};

CpText Analyze(absl::string_view text) {
  CpText t;
  t.cpts = DecodeUtf8Lenient(text);
  t.props.resize(t.cpts.size());
  for (size_t i = 0; i < t.cpts.size(); ++i) {
    const CodepointClass cls = GetCodepointClass(t.cpts[i]);
    t.props[i] = kValid | (cls == CodepointClass::kLetter ? kLetter : 0) |
                 (cls == CodepointClass::kNumber ? kNumber : 0) |
                 (IsWhitespace(t.cpts[i]) ? kSpace : 0) |
                 (cls == CodepointClass::kPunctuation ? kPunctuation : 0);
  }
  return t;
}

// One piece [ini, end) of the text being split further, and the lengths it splits into.
class PieceSplitter {
 public:
  PieceSplitter(const CpText& t, size_t ini, size_t end, std::vector<size_t>* out)
      : t_(t), ini_(ini), end_(end), prev_end_(ini), out_(out) {}

  size_t end() const { return end_; }
  uint32_t Cpt(size_t pos) const { return InRange(pos) ? t_.cpts[pos] : kOutOfRange; }
  uint8_t Props(size_t pos) const { return InRange(pos) ? t_.props[pos] : 0; }
  bool Is(size_t pos, uint8_t prop) const { return (Props(pos) & prop) != 0; }
  // Ends the current word at `end`; returns its length (empty words are dropped).
  size_t Add(size_t end) {
    const size_t len = end - prev_end_;
    if (len > 0) out_->push_back(len);
    prev_end_ = end;
    return len;
  }

 private:
  bool InRange(size_t pos) const { return ini_ <= pos && pos < end_; }

  const CpText& t_;
  size_t ini_, end_, prev_end_;
  std::vector<size_t>* out_;
};

bool IsCrLf(uint32_t c) { return c == '\r' || c == '\n'; }
uint32_t AsciiLower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

// 's 't 're 've 'm 'll 'd at pos (case-folded when `fold`); returns the length or 0.
size_t MatchContraction(const PieceSplitter& s, size_t pos, bool fold) {
  if (s.Cpt(pos) != '\'' || pos + 1 >= s.end()) return 0;
  auto at = [&](size_t p) { return fold ? AsciiLower(s.Cpt(p)) : s.Cpt(p); };
  const uint32_t c1 = at(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= s.end()) return 0;
  const uint32_t c2 = at(pos + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+ (the gpt2 tail); returns false when no whitespace starts at *pos.
bool MatchTrailingSpaces(PieceSplitter& s, size_t* pos) {
  size_t n = 0;
  while (s.Is(*pos + n, kSpace)) ++n;
  if (n > 1 && s.Cpt(*pos + n) != kOutOfRange) {  // leave the last space to the next word.
    *pos += n - 1;
  } else if (n > 0) {
    *pos += n;
  } else {
    return false;
  }
  s.Add(*pos);
  return true;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ (the llama3 and gpt-4o tails); a codepoint none of them takes
// becomes a word of its own.
void MatchSpaces(PieceSplitter& s, size_t* pos) {
  size_t crlf_end = 0;  // just past the last \r or \n of the whitespace run.
  for (size_t p = *pos; s.Is(p, kSpace); ++p) {
    if (IsCrLf(s.Cpt(p))) crlf_end = p + 1;
  }
  if (crlf_end > 0) {
    s.Add(*pos = crlf_end);
    return;
  }
  if (!MatchTrailingSpaces(s, pos)) s.Add(++*pos);
}

constexpr uint8_t kLetterNumberSpace = kLetter | kNumber | kSpace;

// [^\s\p{L}\p{N}] as llama.cpp tests it: any codepoint of the piece that is none of those.
bool IsOther(uint8_t props) { return (props & kValid) && !(props & kLetterNumberSpace); }

// The end of the run of codepoints with `prop` starting at pos.
size_t RunEnd(const PieceSplitter& s, size_t pos, uint8_t prop) {
  while (s.Is(pos, prop)) ++pos;
  return pos;
}

// llama.cpp's unicode_regex_split_custom_gpt2 over one piece.
void SplitGpt2Piece(PieceSplitter& s, size_t pos) {
  while (pos < s.end()) {
    const uint32_t cpt = s.Cpt(pos);
    if (const size_t n = MatchContraction(s, pos, /*fold=*/false)) {
      pos += s.Add(pos + n);
      continue;
    }
    const size_t body = pos + (cpt == ' ');  // where the run after an optional space starts.
    const uint8_t p2 = s.Props(cpt == ' ' ? pos + 1 : pos);
    if (p2 & kLetter) {  // ?\p{L}+
      pos = RunEnd(s, body, kLetter);
    } else if (p2 & kNumber) {  // ?\p{N}+
      pos = RunEnd(s, body, kNumber);
    } else if (IsOther(p2)) {  // ?[^\s\p{L}\p{N}]+
      pos = body;
      while (IsOther(s.Props(pos))) ++pos;
    } else {
      if (!MatchTrailingSpaces(s, &pos)) s.Add(++pos);  // no match: one codepoint.
      continue;
    }
    s.Add(pos);
  }
}

// llama.cpp's unicode_regex_split_custom_llama3 (max_digits 3) and _qwen2 (max_digits 1).
void SplitLlama3Piece(PieceSplitter& s, size_t pos, size_t max_digits) {
  while (pos < s.end()) {
    const uint32_t cpt = s.Cpt(pos);
    const uint8_t props = s.Props(pos);
    if (const size_t n = MatchContraction(s, pos, /*fold=*/true)) {  // (?i:'s|'t|...)
      pos += s.Add(pos + n);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!IsCrLf(cpt) && !(props & kNumber) && (props & kLetter || s.Is(pos + 1, kLetter))) {
      s.Add(pos = RunEnd(s, pos + 1, kLetter));
      continue;
    }
    if (props & kNumber) {  // \p{N}{1,max_digits}, repeated over the whole digit run.
      for (size_t group = pos; s.Is(pos, kNumber);) {
        if (++pos - group >= max_digits) s.Add(group = pos);
      }
      s.Add(pos);
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*". llama.cpp also takes a lone space at the end of the
    // piece here (its flags test looks past the end and finds nothing).
    if (!(s.Props(cpt == ' ' ? pos + 1 : pos) & kLetterNumberSpace)) {
      pos += (cpt == ' ');
      while (IsOther(s.Props(pos))) ++pos;
      while (IsCrLf(s.Cpt(pos))) ++pos;
      s.Add(pos);
      continue;
    }
    MatchSpaces(s, &pos);
  }
}

bool IsAsciiUpper(uint32_t c) { return c >= 'A' && c <= 'Z'; }
bool IsAsciiLower(uint32_t c) { return c >= 'a' && c <= 'z'; }

// llama.cpp's gpt-4o letter classes, (?=\p{L})[^a-z] and (?=\p{L})[^A-Z]: a non-ASCII
// letter is both.
bool IsUpperish(const PieceSplitter& s, size_t pos) {
  return s.Is(pos, kLetter) && !IsAsciiLower(s.Cpt(pos));
}
bool IsLowerish(const PieceSplitter& s, size_t pos) {
  return s.Is(pos, kLetter) && !IsAsciiUpper(s.Cpt(pos));
}

// The end of the gpt-4o word at pos (its first two alternatives, in std::regex's backtracking
// order), or pos when neither matches.
size_t MatchCasedWord(const PieceSplitter& s, size_t pos) {
  // [^\r\n\p{L}\p{N}]? : taking it is the only way on, as the next part needs a letter.
  const uint8_t props = s.Props(pos);
  const size_t body =
      pos + ((props & kValid) && !IsCrLf(s.Cpt(pos)) && !(props & (kLetter | kNumber)));
  size_t upper_end = body;
  while (IsUpperish(s, upper_end)) ++upper_end;
  size_t end;
  if (IsLowerish(s, upper_end)) {  // upper* lower+
    end = upper_end;
    while (IsLowerish(s, end)) ++end;
  } else {
    // upper* lower+ backtracks to the upper run's last non-ASCII letter (lower as well);
    // failing that, upper+ lower* takes the run of A-Z.
    end = upper_end;
    while (end > body && IsAsciiUpper(s.Cpt(end - 1))) --end;
    if (end == body) end = upper_end;
    if (end == body) return pos;
  }
  return end + MatchContraction(s, end, /*fold=*/true);
}

// llama.cpp's gpt-4o regex, run by std::regex over the collapsed text (see kGpt4o).
void SplitGpt4oPiece(PieceSplitter& s, size_t pos) {
  constexpr size_t kMaxDigits = 3;
  while (pos < s.end()) {
    if (const size_t end = MatchCasedWord(s, pos); end > pos) {
      s.Add(pos = end);
      continue;
    }
    if (s.Is(pos, kNumber)) {  // \p{N}{1,3}
      const size_t group = pos;
      while (s.Is(pos, kNumber) && pos - group < kMaxDigits) ++pos;
      s.Add(pos);
      continue;
    }
    const size_t body = pos + (s.Cpt(pos) == ' ');
    if (IsOther(s.Props(body))) {  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
      pos = body;
      while (IsOther(s.Props(pos))) ++pos;
      while (IsCrLf(s.Cpt(pos)) || s.Cpt(pos) == '/') ++pos;
      s.Add(pos);
      continue;
    }
    MatchSpaces(s, &pos);
  }
}

// A regex "[class]+" split the way llama.cpp's std::regex fallback does it: each maximal run
// of positions `in_class` accepts is a word, and so is each stretch between runs.
template <typename Pred>
void SplitRunsPiece(PieceSplitter& s, size_t pos, Pred in_class) {
  while (pos < s.end()) {
    const bool inside = in_class(pos);
    while (pos < s.end() && in_class(pos) == inside) ++pos;
    s.Add(pos);
  }
}

bool IsAsciiDigit(uint32_t c) { return c >= '0' && c <= '9'; }

// "[0-9][0-9][0-9]": leftmost non-overlapping triples of ASCII digits become words.
void SplitDigitTriplesPiece(PieceSplitter& s, size_t pos) {
  constexpr size_t kTriple = 3;
  while (pos + kTriple <= s.end()) {
    if (IsAsciiDigit(s.Cpt(pos)) && IsAsciiDigit(s.Cpt(pos + 1)) && IsAsciiDigit(s.Cpt(pos + 2))) {
      s.Add(pos);
      s.Add(pos += kTriple);
    } else {
      ++pos;
    }
  }
  s.Add(s.end());
}

// The class of the default chain's first regex, "[\p{P}\$\+<=>\^~\|]+" (on ASCII,
// llama.cpp's collapsed \p{P} is exactly the P characters).
bool IsDefaultPunctuation(uint32_t c, uint8_t props) {
  return (props & kPunctuation) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
         c == '^' || c == '~' || c == '|';
}

// Applies `split_piece` to every piece of `pieces` (lengths in codepoints).
template <typename SplitPiece>
std::vector<size_t> SplitEach(const CpText& t, const std::vector<size_t>& pieces,
                              SplitPiece split_piece) {
  std::vector<size_t> out;
  out.reserve(pieces.size());
  size_t start = 0;
  for (size_t len : pieces) {
    PieceSplitter s(t, start, start + len, &out);
    split_piece(s, start);
    start += len;
  }
  return out;
}

// llama.cpp's chain for "default": each regex splits the pieces the previous one left.
std::vector<size_t> SplitDefault(const CpText& t, std::vector<size_t> pieces) {
  pieces = SplitEach(t, pieces, [](PieceSplitter& s, size_t pos) {
    SplitRunsPiece(s, pos, [&s](size_t p) { return IsDefaultPunctuation(s.Cpt(p), s.Props(p)); });
  });
  pieces = SplitEach(t, pieces, SplitGpt2Piece);
  pieces = SplitEach(t, pieces, [](PieceSplitter& s, size_t pos) {  // \p{N}+
    SplitRunsPiece(s, pos, [&s](size_t p) { return s.Is(p, kNumber); });
  });
  return SplitEach(t, pieces, SplitDigitTriplesPiece);
}

std::vector<size_t> SplitLengths(BpePreTokenizer kind, const CpText& t) {
  const std::vector<size_t> whole = {t.cpts.size()};
  switch (kind) {
    case BpePreTokenizer::kGpt2:
      return SplitEach(t, whole, SplitGpt2Piece);
    case BpePreTokenizer::kLlama3:
      return SplitEach(t, whole, [](PieceSplitter& s, size_t p) { SplitLlama3Piece(s, p, 3); });
    case BpePreTokenizer::kQwen2:
      return SplitEach(t, whole, [](PieceSplitter& s, size_t p) { SplitLlama3Piece(s, p, 1); });
    case BpePreTokenizer::kGpt4o:
      return SplitEach(t, whole, SplitGpt4oPiece);
    case BpePreTokenizer::kDefault:
      break;
  }
  return SplitDefault(t, whole);
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
    {"llama3", BpePreTokenizer::kLlama3},
    {"llama-v3", BpePreTokenizer::kLlama3},
    {"llama-bpe", BpePreTokenizer::kLlama3},
    {"falcon3", BpePreTokenizer::kLlama3},
    {"falcon-h1", BpePreTokenizer::kLlama3},
    {"pixtral", BpePreTokenizer::kLlama3},
    {"qwen2", BpePreTokenizer::kQwen2},
    {"deepseek-r1-qwen", BpePreTokenizer::kQwen2},
    {"gpt-4o", BpePreTokenizer::kGpt4o},
    {"llama4", BpePreTokenizer::kGpt4o},
    {"kanana2", BpePreTokenizer::kGpt4o},
    {"talkie", BpePreTokenizer::kGpt4o},
    {"minimax-m2", BpePreTokenizer::kGpt4o},
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

std::vector<std::string> PreTokenize(BpePreTokenizer kind, absl::string_view text) {
  const CpText t = Analyze(text);
  std::vector<std::string> words;
  size_t start = 0;
  for (size_t len : SplitLengths(kind, t)) {
    std::string& word = words.emplace_back();
    for (size_t i = start; i < start + len; ++i) AppendUtf8(t.cpts[i], &word);
    start += len;
  }
  return words;
}

BpeTokenizer::BpeTokenizer(Vocab vocab, BpePreTokenizer pre, bool ignore_merges)
    : Tokenizer(std::move(vocab)), pre_(pre), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &byte_chars_[b]);
    byte_char_ids_[b] = this->vocab().Find(byte_chars_[b]);
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::Create(const GgufFile& file) {
  BpePreTokenizer pre = BpePreTokenizer::kDefault;
  if (file.Has(kPreKey)) {
    TG_ASSIGN_OR_RETURN(std::string name, file.GetString(kPreKey));
    TG_ASSIGN_OR_RETURN(pre, ParseBpePreTokenizer(name));
  }
  // llama3 vocabularies add BOS and take whole-word tokens as they are (ignore_merges).
  const bool llama3 = pre == BpePreTokenizer::kLlama3;
  tokenizer_internal::VocabDefaults defaults;
  defaults.bos = defaults.eos = kBpeDefaultSpecialId;
  defaults.add_bos = llama3;
  TG_ASSIGN_OR_RETURN(Vocab vocab, tokenizer_internal::LoadVocab(file, defaults));
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
  std::string text;  // the byte-level characters of `word`.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(word[i]);
    const int index = static_cast<int>(i);
    symbols.push_back({index - 1, i + 1 == word.size() ? -1 : index + 1, text.size(),
                       byte_chars_[b].size(), byte_char_ids_[b]});
    text += byte_chars_[b];
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
    // which byte-level vocabularies rarely have, so it usually vanishes.
    for (char c : absl::string_view(text).substr(symbols[i].start, symbols[i].n)) {
      if (const int32_t id = v.Find(absl::string_view(&c, 1)); id >= 0) out->push_back(id);
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
    const CpText t = Analyze(f.text);
    size_t start = 0;
    for (size_t len : SplitLengths(pre_, t)) {
      word.clear();
      for (size_t i = start; i < start + len; ++i) AppendUtf8(t.cpts[i], &word);
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
