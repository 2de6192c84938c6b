// llama.cpp's hand-written splitters; see pre_tokenizer_custom.h. Transcriptions of its
// unicode_regex_split_custom_{gpt2,llama3,qwen2,qwen35} (and of what its std::regex does with
// the gpt-4o pattern over its collapsed text), quirks included: tokenization must give
// llama.cpp's ids, not what a textbook regex engine would.
#include "models/pre_tokenizer_custom.h"

#include <cstdint>

#include "models/unicode.h"

namespace tg {
namespace pre_tokenizer_internal {
namespace {

// What the splitters ask about a codepoint. Positions outside the piece being split have no
// bits at all (llama.cpp's empty unicode_cpt_flags), which is what kValid tells apart.
enum CpProps : uint8_t {
  kValid = 1 << 0,
  kLetter = 1 << 1,
  kNumber = 1 << 2,
  kSpace = 1 << 3,  // \s
  kMark = 1 << 4,   // \p{M}
};
constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

struct CpText {
  absl::Span<const uint32_t> cpts;
  std::vector<uint8_t> props;
};

CpText Analyze(absl::Span<const uint32_t> cpts) {
  CpText t;
  t.cpts = cpts;
  t.props.resize(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) {
    const CodepointClass cls = GetCodepointClass(cpts[i]);
    t.props[i] = kValid | (cls == CodepointClass::kLetter ? kLetter : 0) |
                 (cls == CodepointClass::kNumber ? kNumber : 0) |
                 (IsWhitespace(cpts[i]) ? kSpace : 0) | (cls == CodepointClass::kMark ? kMark : 0);
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

// llama.cpp's unicode_regex_split_custom_llama3 (max_digits 3), _qwen2 (max_digits 1) and
// _qwen35 (max_digits 1, `word` = letters and combining marks: [\p{L}\p{M}]+ words, and
// marks are no "other" codepoints).
void SplitLlama3Piece(PieceSplitter& s, size_t pos, size_t max_digits, uint8_t word) {
  const uint8_t word_number_space = word | kNumber | kSpace;
  auto is_other = [&](uint8_t props) { return (props & kValid) && !(props & word_number_space); };
  while (pos < s.end()) {
    const uint32_t cpt = s.Cpt(pos);
    const uint8_t props = s.Props(pos);
    if (const size_t n = MatchContraction(s, pos, /*fold=*/true)) {  // (?i:'s|'t|...)
      pos += s.Add(pos + n);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!IsCrLf(cpt) && !(props & kNumber) && (props & word || s.Is(pos + 1, word))) {
      s.Add(pos = RunEnd(s, pos + 1, word));
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
    if (!(s.Props(cpt == ' ' ? pos + 1 : pos) & word_number_space)) {
      pos += (cpt == ' ');
      while (is_other(s.Props(pos))) ++pos;
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

// Applies `split_piece` to every piece of `pieces` (lengths in codepoints).
template <typename SplitPiece>
std::vector<size_t> SplitEach(const CpText& t, absl::Span<const size_t> pieces,
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

}  // namespace

std::vector<size_t> SplitCustom(CustomSplitter which, absl::Span<const uint32_t> cpts,
                                absl::Span<const size_t> pieces) {
  const CpText t = Analyze(cpts);
  switch (which) {
    case CustomSplitter::kGpt2:
      return SplitEach(t, pieces, SplitGpt2Piece);
    case CustomSplitter::kLlama3:
      return SplitEach(t, pieces,
                       [](PieceSplitter& s, size_t p) { SplitLlama3Piece(s, p, 3, kLetter); });
    case CustomSplitter::kQwen2:
      return SplitEach(t, pieces,
                       [](PieceSplitter& s, size_t p) { SplitLlama3Piece(s, p, 1, kLetter); });
    case CustomSplitter::kQwen35:
      return SplitEach(t, pieces, [](PieceSplitter& s, size_t p) {
        SplitLlama3Piece(s, p, 1, kLetter | kMark);
      });
    case CustomSplitter::kGpt4o:
      break;
  }
  return SplitEach(t, pieces, SplitGpt4oPiece);
}

}  // namespace pre_tokenizer_internal
}  // namespace tg
