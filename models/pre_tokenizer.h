// The BPE pre-tokenizers: what tokenizer.ggml.pre names, and how each splits text into the
// words BPE merges within. A pre-tokenizer is a chain of steps (llama.cpp's regex_exprs), each
// splitting every piece the previous one left: a split pattern run by our own matcher
// (models/pre_tokenizer_regex.h), or one of llama.cpp's hand-written splitters where llama.cpp
// uses one for that pattern (models/pre_tokenizer_custom.h). The chains are data, in
// pre_tokenizer.cc. Constant tables compiled once (thread-safe); every function is
// thread-safe.
#ifndef TENSORGRID_MODELS_PRE_TOKENIZER_H_
#define TENSORGRID_MODELS_PRE_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tg {

// The word splitters of tokenizer.ggml.pre values (llama.cpp's llama_vocab_pre_type groups).
enum class BpePreTokenizer {
  // "default" or no key: punctuation runs [\p{P}\$\+<=>\^~\|]+, then the GPT-2 pattern,
  // \p{N}+, then ASCII digit triples.
  kDefault,
  // "gpt-2" (and "gpt2"), "mpt", "olmo": 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
  // ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // "llama3", "llama-v3", "llama-bpe" and kin:
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+
  //   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // "qwen2" and kin: the llama3 pattern with \p{N} (single digits).
  kQwen2,
  // "qwen35": the qwen2 pattern with combining marks as part of words ([\p{L}\p{M}]+).
  kQwen35,
  // "gpt-4o" (gpt-oss's o200k_harmony), "llama4", "kanana2", "talkie", "minimax-m2":
  // [^\r\n\p{L}\p{N}]?((?=\p{L})[^a-z])*((?=\p{L})[^A-Z])+(?:'s|'t|...)?
  //   |[^\r\n\p{L}\p{N}]?((?=\p{L})[^a-z])+((?=\p{L})[^A-Z])*(?:'s|'t|...)?
  //   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // That is llama.cpp's rewrite of o200k's case-aware regex (its \p{Lu}.. and \p{M} classes
  // become "letter other than a-z / A-Z"), run by std::regex on text where every non-ASCII
  // letter is one placeholder: so a non-ASCII letter counts as upper and lower case alike and
  // combining marks are not part of words. Tokens must equal llama.cpp's, so that is what
  // this splitter does, not tiktoken.
  kGpt4o,
  // "falcon": punctuation runs [\p{P}\$\+<=>\^~\|`]+, the GPT-2 pattern, ASCII digit triples.
  kFalcon,
  // "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
  // "mellum2": each digit alone (\p{N}), then the GPT-2 pattern.
  kStarcoder,
  // "deepseek-llm": \r and \n alone, \s? + runs of Latin/Greek/Cyrillic/... letters, \s? +
  // runs of ASCII and fullwidth punctuation, trailing spaces, CJK and Hangul runs, \p{N}+.
  kDeepseekLlm,
  // "deepseek-coder": \r and \n alone, \s?\p{L}+, \s?\p{P}+, CJK and Hangul runs, each digit.
  kDeepseekCoder,
  // "gemma4" (and tokenizer.ggml.model "gemma4"): SentencePiece-style BPE on raw UTF-8, spaces
  // already escaped as U+2581, so the only split is into runs of newlines and of the rest.
  // BpeTokenizer takes this pre-tokenizer as its "raw UTF-8" mode (see tokenizer_bpe.h).
  kGemma4,
};

// INVALID_ARGUMENT naming tokenizer.ggml.pre and the value for one llama.cpp would reject or
// that is not implemented here (the message lists those that are).
absl::StatusOr<BpePreTokenizer> ParseBpePreTokenizer(absl::string_view name);
// Every tokenizer.ggml.pre value ParseBpePreTokenizer accepts.
std::vector<std::string> BpePreTokenizerNames();

// The words `cpts` splits into, as lengths in codepoints.
std::vector<size_t> PreTokenizeLengths(BpePreTokenizer kind, absl::Span<const uint32_t> cpts);

// The words `text` splits into (UTF-8, before byte-level encoding; malformed UTF-8 comes out
// as U+FFFD, as in llama.cpp). Concatenated they give the text back.
std::vector<std::string> PreTokenize(BpePreTokenizer kind, absl::string_view text);

}  // namespace tg

#endif  // TENSORGRID_MODELS_PRE_TOKENIZER_H_
