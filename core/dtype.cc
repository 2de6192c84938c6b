#include "core/dtype.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant_blocks.h"

namespace tg {

const DTypeTraits& Traits(DType type) {
  static constexpr DTypeTraits kF32{"f32", 1, 4, false};
  static constexpr DTypeTraits kF16{"f16", 1, 2, false};
  static constexpr DTypeTraits kBF16{"bf16", 1, 2, false};
  static constexpr DTypeTraits kI32{"i32", 1, 4, false};
  static constexpr DTypeTraits kQ8_0{"q8_0", kQK8_0, sizeof(BlockQ8_0), true};
  static constexpr DTypeTraits kQ4_0{"q4_0", kQK4_0, sizeof(BlockQ4_0), true};
  static constexpr DTypeTraits kQ4_K{"q4_K", kQK_K, sizeof(BlockQ4_K), true};
  static constexpr DTypeTraits kQ6_K{"q6_K", kQK_K, sizeof(BlockQ6_K), true};
  switch (type) {
    case DType::kF32: return kF32;
    case DType::kF16: return kF16;
    case DType::kBF16: return kBF16;
    case DType::kI32: return kI32;
    case DType::kQ8_0: return kQ8_0;
    case DType::kQ4_0: return kQ4_0;
    case DType::kQ4_K: return kQ4_K;
    case DType::kQ6_K: return kQ6_K;
  }
  return kF32;  // unreachable for valid enum values; DTypeFromId guards network input.
}

absl::StatusOr<DType> DTypeFromId(uint32_t id) {
  for (DType t : kAllDTypes) {
    if (static_cast<uint32_t>(t) == id) return t;
  }
  return absl::UnimplementedError(absl::StrCat("unsupported tensor type id ", id));
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType t : kAllDTypes) {
    if (absl::EqualsIgnoreCase(name, DTypeName(t))) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown tensor type '", name,
                                                 "' (known: f32 f16 bf16 i32 q8_0 q4_0 q4_K q6_K)"));
}

}  // namespace tg
