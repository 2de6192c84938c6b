// BpeTokenizer: GPT-2 style byte-level BPE (tokenizer.ggml.model "gpt2"), reproducing
// llama.cpp's llm_tokenizer_bpe: the text is split into words by the vocabulary's
// pre-tokenizer (tokenizer.ggml.pre, models/pre_tokenizer.h), each word's
// bytes become GPT-2's printable byte-level characters, and adjacent symbols merge lowest rank
// first (tokenizer.ggml.merges, rank = index). The "gemma4" pre-tokenizer (and
// tokenizer.ggml.model "gemma4") is SentencePiece-style BPE instead, as llama.cpp runs it:
// spaces become U+2581 before splitting, words stay raw UTF-8 (one symbol per codepoint), a
// symbol that is no token falls back to <0xXX> byte tokens, and pieces turn U+2581 back into
// spaces. Immutable after Create; thread-safe.
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
#include "gguf/gguf_file.h"
#include "models/pre_tokenizer.h"
#include "models/tokenizer.h"

namespace tg {

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
  bool raw_utf8() const { return pre_ == BpePreTokenizer::kGemma4; }
  absl::Status LoadMerges(const std::vector<std::string>& merges);

  // The merge for two adjacent symbols (their texts and token ids), or nullptr.
  const Merge* FindMerge(absl::string_view left, int32_t left_id, absl::string_view right,
                         int32_t right_id) const;
  // Appends the tokens of one word (its UTF-8, before byte-level encoding).
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
