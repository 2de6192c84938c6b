// BpeTokenizer: GPT-2 style byte-level BPE (tokenizer.ggml.model "gpt2"), reproducing
// llama.cpp's llm_tokenizer_bpe: the text is split into words by the vocabulary's
// pre-tokenizer (tokenizer.ggml.pre: llama3 / qwen2 / gpt-2 / gpt-4o / default regexes,
// implemented by hand over codepoints, matching what llama.cpp's unicode.cpp does), each word's
// bytes become GPT-2's printable byte-level characters, and adjacent symbols merge lowest rank
// first (tokenizer.ggml.merges, rank = index). Immutable after Create; thread-safe.
#ifndef TENSORGRID_MODELS_TOKENIZER_BPE_H_
#define TENSORGRID_MODELS_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/gguf_file.h"
#include "models/tokenizer.h"

namespace tg {

// The word splitters of tokenizer.ggml.pre values (llama.cpp's llama_vocab_pre_type).
enum class BpePreTokenizer {
  // "default" or no key: llama.cpp's fallback chain of four regexes (punctuation runs, the
  // GPT-2 regex, \p{N}+, then ASCII digit triples).
  kDefault,
  // "gpt-2" (and "gpt2"): 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
  // ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // "llama3", "llama-v3", "llama-bpe" and kin:
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+
  //   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // "qwen2" and kin: the llama3 regex with \p{N} (single digits).
  kQwen2,
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
};

// INVALID_ARGUMENT naming tokenizer.ggml.pre and the value for one llama.cpp would reject or
// that is not implemented here.
absl::StatusOr<BpePreTokenizer> ParseBpePreTokenizer(absl::string_view name);
// Every tokenizer.ggml.pre value ParseBpePreTokenizer accepts.
std::vector<std::string> BpePreTokenizerNames();

// The words `text` splits into (UTF-8, before byte-level encoding; malformed UTF-8 comes out
// as U+FFFD, as in llama.cpp). Concatenated they give the text back.
std::vector<std::string> PreTokenize(BpePreTokenizer kind, absl::string_view text);

class BpeTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const GgufFile& file);

  std::string TokenToPiece(int32_t id) const override;

 protected:
  std::vector<int32_t> EncodeText(absl::string_view text, bool add_special,
                                  bool parse_special) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // the token the pair merges into, -1 when that text is no token.
  };
  BpeTokenizer(tokenizer_internal::Vocab vocab, BpePreTokenizer pre, bool ignore_merges);
  absl::Status LoadMerges(const std::vector<std::string>& merges);

  // The merge for two adjacent symbols (their texts and token ids), or nullptr.
  const Merge* FindMerge(absl::string_view left, int32_t left_id, absl::string_view right,
                         int32_t right_id) const;
  // Appends the tokens of one byte-level encoded word.
  void EncodeWord(absl::string_view word, std::vector<int32_t>* out) const;

  BpePreTokenizer pre_;
  bool ignore_merges_;  // llama3: a word that is a token is taken whole, merges skipped.
  // Merges whose halves are both tokens, keyed by (left id << 32 | right id): the fast path.
  absl::flat_hash_map<uint64_t, Merge> id_merges_;
  // The rest (halves that are no token), keyed by TextMergeKey.
  absl::flat_hash_map<std::string, Merge> text_merges_;
  std::array<std::string, 256> byte_chars_;  // GPT-2 byte-level character of each byte.
  std::array<int32_t, 256> byte_char_ids_;   // the token of each such character, or -1.
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_TOKENIZER_BPE_H_
