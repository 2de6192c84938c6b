// Tokenizer: text <-> token ids from a GGUF vocabulary (tokenizer.ggml.*), matching
// llama.cpp's tokenizers: SPM (llama 2 style: space prefix, "▁" for spaces, score-ordered
// bigram merges, <0xXX> byte fallback) and BPE (gpt2 byte-level with merges, and the llama3
// ("llama-bpe") and qwen2 pre-tokenizer splits). Immutable after FromGguf; thread-safe.
#ifndef TENSORGRID_MODELS_TOKENIZER_H_
#define TENSORGRID_MODELS_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gguf/gguf_file.h"

namespace tg {

namespace tokenizer_internal {

// What the SPM and BPE implementations share; not for callers.

// Token attribute bits, as llama.cpp's llama_token_attr.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
};

// What both tokenizers read from tokenizer.ggml.*, with llama.cpp's defaults applied.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;    // 0 when the file has none.
  std::vector<uint32_t> attrs;  // TokenAttr bits per token.
  absl::flat_hash_map<std::string, int32_t> ids;
  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  absl::flat_hash_set<int32_t> eog;
  // User-defined tokens, longest first: Encode cuts them out of the text before the
  // tokenizer proper runs, as llama.cpp does even with parse_special = false.
  std::vector<int32_t> user_defined;
  // With parse_special also the control tokens ("<|im_start|>", "<s>"), longest first.
  std::vector<int32_t> special;

  int32_t Find(absl::string_view text) const;  // -1 when not a token.
  bool Has(int32_t id, uint32_t attr) const { return (attrs[id] & attr) != 0; }
};

// The special ids and flags a vocabulary type defaults to when the file does not say.
struct VocabDefaults {
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
};
absl::StatusOr<Vocab> LoadVocab(const GgufFile& file, const VocabDefaults& defaults);

// A piece of Encode's input: raw text, or a user-defined token found in it.
struct Fragment {
  int32_t token = -1;  // -1 for text.
  absl::string_view text;
};
// `parse_special`: control tokens are cut out too (Vocab::special), as chat prompts need.
std::vector<Fragment> Partition(const Vocab& vocab, absl::string_view text,
                                bool parse_special = false);

}  // namespace tokenizer_internal

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Reads tokenizer.ggml.model ("llama" = SPM, "gpt2" and "gemma4" = BPE), .pre, .tokens, .scores,
  // .token_type, .merges, the special ids and add_bos/add_eos/add_space_prefix flags.
  // INVALID_ARGUMENT naming the key for an unsupported or inconsistent vocabulary.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  // As llama_tokenize(vocab, text, add_special, parse_special): with parse_special the text
  // of a control token ("<|im_start|>" in a rendered chat prompt) is that token.
  std::vector<int32_t> Encode(absl::string_view text, bool add_special,
                              bool parse_special = false) const {
    return EncodeText(text, add_special, parse_special);
  }
  // The bytes one token stands for, as llama_token_to_piece(..., lstrip 0, special true):
  // SPM "▁" becomes a space, byte tokens their byte, BPE byte-level chars their bytes.
  virtual std::string TokenToPiece(int32_t id) const = 0;
  // Text of `ids`, the inverse of Encode: pieces concatenated, control tokens (BOS, EOS...)
  // left out, and the space SPM's add_space_prefix put before the text removed again.
  // Streaming output wants TokenToPiece instead (it keeps every space).
  std::string Decode(absl::Span<const int32_t> ids) const;

  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos() const { return vocab_.bos; }  // -1 when the vocabulary has none.
  int32_t eos() const { return vocab_.eos; }
  // End of generation: eos, eot and the like.
  bool IsEog(int32_t id) const { return vocab_.eog.contains(id); }

 protected:
  explicit Tokenizer(tokenizer_internal::Vocab vocab) : vocab_(std::move(vocab)) {}
  // Encode of a vocabulary type.
  virtual std::vector<int32_t> EncodeText(absl::string_view text, bool add_special,
                                          bool parse_special) const = 0;
  const tokenizer_internal::Vocab& vocab() const { return vocab_; }

 private:
  tokenizer_internal::Vocab vocab_;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_TOKENIZER_H_
