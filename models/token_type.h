// TokenType: the values of tokenizer.ggml.token_type (llama.cpp's llama_token_type), for the
// tokenizers that read them, the synthetic vocabulary that writes them and their tests.
// Constants only; thread-safe.
#ifndef TENSORGRID_MODELS_TOKEN_TYPE_H_
#define TENSORGRID_MODELS_TOKEN_TYPE_H_

#include <cstdint>

namespace tg {

// llama.cpp numbers them 0 to 6 in this order.
enum TokenType : int32_t {
  kTokenTypeUndefined,
  kTokenTypeNormal,
  kTokenTypeUnknown,
  kTokenTypeControl,
  kTokenTypeUserDefined,
  kTokenTypeUnused,
  kTokenTypeByte,
};
static_assert(kTokenTypeByte == 6, "llama.cpp's LLAMA_TOKEN_TYPE_BYTE");

}  // namespace tg

#endif  // TENSORGRID_MODELS_TOKEN_TYPE_H_
