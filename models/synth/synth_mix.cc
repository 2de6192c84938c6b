// Tensor type choice of synthetic llama files (see synth_mix.h and docs/gguf.md).
#include "models/synth/synth_mix.h"

#include "absl/strings/match.h"

namespace tg::synth {
namespace {

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer
// in between, get the bigger type in the _M mixes.
bool UseMoreBits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

bool Fits(DType type, int64_t ne0) { return ne0 % BlockSize(type) == 0; }

// LLAMA_FTYPE_MOSTLY_Q4_K_M / Q5_K_M for a llama without experts (llama_tensor_get_type_impl):
// output.weight becomes Q6_K (Q8_0 when its rows do not fit 256-element blocks); attn_v and
// ffn_down become Q6_K in the layers use_more_bits picks; token_embd and everything else keep
// the base type.
DType KQuantsMType(DType base, const MatrixSlot& slot, int64_t n_layer) {
  if (slot.name == "output.weight") {
    return Fits(base, slot.ne0) ? DType::kQ6_K : DType::kQ8_0;
  }
  const bool more_bits = slot.layer >= 0 && UseMoreBits(slot.layer, n_layer);
  if (more_bits &&
      (absl::StrContains(slot.name, "attn_v.weight") || absl::StrContains(slot.name, "ffn_down"))) {
    return DType::kQ6_K;
  }
  return base;
}

}  // namespace

DType FallbackType(DType type, int64_t ne0) {
  // tensor_type_fallback as listed in synth_mix.h; F16 for any other type.
  constexpr struct {
    DType type;
    DType fallback;
  } kFallbacks[] = {
      {DType::kQ2_K, DType::kQ4_0}, {DType::kQ3_K, DType::kQ4_0}, {DType::kQ4_K, DType::kQ5_0},
      {DType::kQ5_K, DType::kQ5_1}, {DType::kQ6_K, DType::kQ8_0}, {DType::kIQ4_XS, DType::kIQ4_NL},
  };
  DType fallback = DType::kF16;
  for (const auto& f : kFallbacks) {
    if (f.type == type) fallback = f.fallback;
  }
  return Fits(fallback, ne0) ? fallback : DType::kF16;
}

MatrixType ChooseMatrixType(DType base, TypeMix mix, const MatrixSlot& slot, int64_t n_layer) {
  const DType wanted = mix == TypeMix::kKQuantsM ? KQuantsMType(base, slot, n_layer) : base;
  if (Fits(wanted, slot.ne0)) return {wanted, wanted};
  return {wanted, FallbackType(wanted, slot.ne0)};
}

}  // namespace tg::synth
