// llama.cpp's hand-written word splitters: for the gpt-2, llama3, qwen2 and qwen35 patterns
// llama.cpp runs its own loops instead of std::regex (unicode_regex_split_custom_*), and those
// loops differ from the patterns at the edges (a lone space at the end of a piece, a
// contraction cut by the piece's end...), so ids equal llama.cpp's only when we do what they
// do; gpt-4o reproduces what std::regex does over llama.cpp's collapsed text. Used as steps of
// the pre-tokenizer chains (models/pre_tokenizer.h). Pure functions; thread-safe.
#ifndef TENSORGRID_MODELS_PRE_TOKENIZER_CUSTOM_H_
#define TENSORGRID_MODELS_PRE_TOKENIZER_CUSTOM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tg {
namespace pre_tokenizer_internal {

enum class CustomSplitter {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
  //   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // The llama3 pattern with \p{N} (single digits).
  kQwen2,
  // The qwen2 pattern with words of [\p{L}\p{M}]+ and [^\s\p{L}\p{M}\p{N}] for the others.
  kQwen35,
  // llama.cpp's rewrite of o200k's case-aware pattern (see BpePreTokenizer::kGpt4o).
  kGpt4o,
};

// Splits each piece of `cpts` (`pieces`: consecutive lengths in codepoints summing to
// cpts.size()) and returns the lengths of the words.
std::vector<size_t> SplitCustom(CustomSplitter which, absl::Span<const uint32_t> cpts,
                                absl::Span<const size_t> pieces);

}  // namespace pre_tokenizer_internal
}  // namespace tg

#endif  // TENSORGRID_MODELS_PRE_TOKENIZER_CUSTOM_H_
