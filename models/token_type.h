// TokenType: the values of tokenizer.ggml.token_type (llama.cpp's llama_token_type), for the
// tokenizers that read them, the synthetic vocabulary that writes them and their tests.
// Constants only; thread-safe.
#ifndef TENSORGRID_MODELS_TOKEN_TYPE_H_
#define TENSORGRID_MODELS_TOKEN_TYPE_H_

#include <cstdint>

namespace tg {

// llama.cpp's numbers (file-format values).
enum TokenType : int32_t {
  kTokenTypeUndefined = 0,
  kTokenTypeNormal = 1,
  kTokenTypeUnknown = 2,
  kTokenTypeControl = 3,
  kTokenTypeUserDefined = 4,
  kTokenTypeUnused = 5,
  kTokenTypeByte = 6,
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_TOKEN_TYPE_H_
