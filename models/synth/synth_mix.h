// The storage type of each matrix of a synthetic llama file, as llama.cpp's llama-quantize
// picks it: one type for every matrix (like `llama-quantize --pure`), or a k-quant "_M" mix
// (Q4_K_M, Q5_K_M) that gives attn_v, ffn_down and output more bits; then, for rows that are
// not a multiple of the chosen type's block, llama.cpp's fallback type. The rules are
// documented in docs/gguf.md. Pure functions, thread-safe.
#ifndef TENSORGRID_MODELS_SYNTH_SYNTH_MIX_H_
#define TENSORGRID_MODELS_SYNTH_SYNTH_MIX_H_

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace tg::synth {

enum class TypeMix {
  kPure,      // every matrix in the base type.
  kKQuantsM,  // LLAMA_FTYPE_MOSTLY_Q4_K_M / Q5_K_M's choices around the base type.
};

// One matrix of the model: its GGUF name, its block (-1 outside the blocks) and row length.
struct MatrixSlot {
  std::string name;
  int64_t layer = -1;
  int64_t ne0 = 0;
};

struct MatrixType {
  DType wanted;  // the mix's choice for this tensor.
  DType stored;  // what the file holds: wanted, or its fallback when the rows do not fit.
};

MatrixType ChooseMatrixType(DType base, TypeMix mix, const MatrixSlot& slot, int64_t n_layer);

// llama.cpp's tensor_type_fallback for a type whose block does not divide the row length:
// Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; IQ4_XS -> IQ4_NL; and F16
// when that does not fit either (or the type has no fallback in llama.cpp).
DType FallbackType(DType type, int64_t ne0);

}  // namespace tg::synth

#endif  // TENSORGRID_MODELS_SYNTH_SYNTH_MIX_H_
