#include "core/dtype.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant_blocks.h"

namespace tg {

const DTypeTraits& Traits(DType type) {
  static constexpr DTypeTraits kF32{"f32", 1, 4, false, 4};
  static constexpr DTypeTraits kF16{"f16", 1, 2, false, 2};
  static constexpr DTypeTraits kBF16{"bf16", 1, 2, false, 2};
  static constexpr DTypeTraits kI32{"i32", 1, 4, false, 4};
  static constexpr DTypeTraits kQ8_0{"q8_0", kQK8_0, sizeof(BlockQ8_0), true, alignof(BlockQ8_0)};
  static constexpr DTypeTraits kQ4_0{"q4_0", kQK4_0, sizeof(BlockQ4_0), true, alignof(BlockQ4_0)};
  static constexpr DTypeTraits kQ5_0{"q5_0", kQK5_0, sizeof(BlockQ5_0), true, alignof(BlockQ5_0)};
  static constexpr DTypeTraits kQ5_1{"q5_1", kQK5_1, sizeof(BlockQ5_1), true, alignof(BlockQ5_1)};
  static constexpr DTypeTraits kQ2_K{"q2_K", kQK_K, sizeof(BlockQ2_K), true, alignof(BlockQ2_K)};
  static constexpr DTypeTraits kQ3_K{"q3_K", kQK_K, sizeof(BlockQ3_K), true, alignof(BlockQ3_K)};
  static constexpr DTypeTraits kQ4_K{"q4_K", kQK_K, sizeof(BlockQ4_K), true, alignof(BlockQ4_K)};
  static constexpr DTypeTraits kQ5_K{"q5_K", kQK_K, sizeof(BlockQ5_K), true, alignof(BlockQ5_K)};
  static constexpr DTypeTraits kQ6_K{"q6_K", kQK_K, sizeof(BlockQ6_K), true, alignof(BlockQ6_K)};
  static constexpr DTypeTraits kIQ4_NL{"iq4_nl", kQK4_NL, sizeof(BlockIQ4_NL), true,
                                       alignof(BlockIQ4_NL)};
  static constexpr DTypeTraits kIQ4_XS{"iq4_xs", kQK_K, sizeof(BlockIQ4_XS), true,
                                       alignof(BlockIQ4_XS)};
  static constexpr DTypeTraits kMXFP4{"mxfp4", kQKMXFP4, sizeof(BlockMXFP4), true,
                                      alignof(BlockMXFP4)};
  switch (type) {
    case DType::kF32:
      return kF32;
    case DType::kF16:
      return kF16;
    case DType::kBF16:
      return kBF16;
    case DType::kI32:
      return kI32;
    case DType::kQ8_0:
      return kQ8_0;
    case DType::kQ4_0:
      return kQ4_0;
    case DType::kQ5_0:
      return kQ5_0;
    case DType::kQ5_1:
      return kQ5_1;
    case DType::kQ2_K:
      return kQ2_K;
    case DType::kQ3_K:
      return kQ3_K;
    case DType::kQ4_K:
      return kQ4_K;
    case DType::kQ5_K:
      return kQ5_K;
    case DType::kQ6_K:
      return kQ6_K;
    case DType::kIQ4_NL:
      return kIQ4_NL;
    case DType::kIQ4_XS:
      return kIQ4_XS;
    case DType::kMXFP4:
      return kMXFP4;
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
  std::string known;
  for (DType t : kAllDTypes) absl::StrAppend(&known, known.empty() ? "" : " ", DTypeName(t));
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tensor type '", name, "' (known: ", known, ")"));
}

}  // namespace tg
