// SpmTokenizer: the SentencePiece-style tokenizer of llama 1/2 vocabularies
// (tokenizer.ggml.model "llama"), reproducing llama.cpp's llm_tokenizer_spm: spaces become
// "▁", text splits into UTF-8 characters, adjacent pairs whose concatenation is a token merge
// highest score first, and characters outside the vocabulary fall back to <0xXX> byte tokens.
// Immutable after Create; thread-safe.
#ifndef TENSORGRID_MODELS_TOKENIZER_SPM_H_
#define TENSORGRID_MODELS_TOKENIZER_SPM_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gguf/gguf_file.h"
#include "models/tokenizer.h"

namespace tg {

class SpmTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const GgufFile& file);

  std::string TokenToPiece(int32_t id) const override;

 protected:
  std::vector<int32_t> EncodeText(absl::string_view text, bool add_special,
                                  bool parse_special) const override;

 private:
  explicit SpmTokenizer(tokenizer_internal::Vocab vocab);

  // Appends the tokens of one text fragment (spaces already escaped to "▁").
  void EncodeFragment(absl::string_view text, std::vector<int32_t>* out) const;
  // Appends a symbol that is no token as its byte tokens (unk when a byte has none).
  void AppendBytes(absl::string_view symbol, std::vector<int32_t>* out) const;

  std::array<int32_t, 256> byte_tokens_;  // <0xXX> (or the raw byte) per byte; -1 if none.
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_TOKENIZER_SPM_H_
