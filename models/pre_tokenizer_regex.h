// PreTokenizerRegex: one split pattern of a BPE pre-tokenizer (llama.cpp's regex_exprs, the
// "Split" patterns of HuggingFace tokenizer.json files), compiled to a small backtracking
// matcher over codepoints. It answers what llama.cpp's std::regex fallback answers, so that
// tokens equal llama.cpp's:
//  - ECMAScript semantics: leftmost match, alternatives in order (the first that lets the
//    whole pattern match wins, not the longest), greedy quantifiers that backtrack,
//    lookaheads that see no further than the piece being split, $ only at its end;
//  - \p{L} \p{N} \p{P} \p{S} \p{M} are Unicode general-category groups (models/unicode.h);
//    \s is White_Space, and a non-ASCII space is matched as U+000B (so it never matches a
//    literal or a range, as in llama.cpp, which rewrites such spaces before matching);
//    \d and \w are ASCII only.
// The subset: literals (any codepoint, UTF-8 in the pattern), escapes \r \n \t \f \v \xHH
// \uHHHH and escaped punctuation, '.', classes [...] / [^...] with ranges and the class
// escapes above, groups (...) and (?:...), lookaheads (?=...) and (?!...), alternation,
// quantifiers ? * + {n} {n,} {n,m} (each also lazy with a trailing ?), and $. Anything else
// (backreferences, lookbehind, ^, (?i), \p{Lu}...) is refused by Compile, naming it.
// Immutable after Compile; thread-safe.
#ifndef TENSORGRID_MODELS_PRE_TOKENIZER_REGEX_H_
#define TENSORGRID_MODELS_PRE_TOKENIZER_REGEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tg {

namespace pre_tokenizer_regex_internal {
struct Node;
}  // namespace pre_tokenizer_regex_internal

class PreTokenizerRegex {
 public:
  // INVALID_ARGUMENT naming the pattern, the offset and the construct for a syntax error or
  // a construct outside the subset.
  static absl::StatusOr<PreTokenizerRegex> Compile(absl::string_view pattern);

  PreTokenizerRegex(PreTokenizerRegex&&) noexcept;
  PreTokenizerRegex& operator=(PreTokenizerRegex&&) noexcept;
  ~PreTokenizerRegex();

  // Splits each piece of `cpts` (`pieces`: consecutive lengths summing to cpts.size()) as
  // llama.cpp's unicode_regex_split_stl does: every match is a piece, and so is every
  // non-empty stretch between matches; empty matches give nothing. Returns the new lengths.
  std::vector<size_t> Split(absl::Span<const uint32_t> cpts, absl::Span<const size_t> pieces) const;

  // The end of the match starting exactly at `pos` of `cpts` (the whole span being the piece),
  // or nullopt when the pattern does not match there.
  std::optional<size_t> MatchAt(absl::Span<const uint32_t> cpts, size_t pos) const;

  const std::string& pattern() const { return pattern_; }

 private:
  PreTokenizerRegex(std::string pattern, std::unique_ptr<pre_tokenizer_regex_internal::Node> root);

  std::string pattern_;
  std::unique_ptr<pre_tokenizer_regex_internal::Node> root_;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_PRE_TOKENIZER_REGEX_H_
