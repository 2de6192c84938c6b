#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant_blocks.h"

namespace tg {

namespace {

struct TypeEntry {
  DType type;
  DTypeTraits traits;
};

// A block-quantized type's traits, from its block struct.
template <typename Block>
constexpr DTypeTraits Quantized(const char* name, int64_t block_size) {
  return {name, block_size, sizeof(Block), true, alignof(Block)};
}

// In enum (GGUF type id) order.
constexpr TypeEntry kTypes[] = {
    {DType::kF32, {"f32", 1, 4, false, 4}},
    {DType::kF16, {"f16", 1, 2, false, 2}},
    {DType::kQ4_0, Quantized<BlockQ4_0>("q4_0", kQK4_0)},
    {DType::kQ5_0, Quantized<BlockQ5_0>("q5_0", kQK5_0)},
    {DType::kQ5_1, Quantized<BlockQ5_1>("q5_1", kQK5_1)},
    {DType::kQ8_0, Quantized<BlockQ8_0>("q8_0", kQK8_0)},
    {DType::kQ2_K, Quantized<BlockQ2_K>("q2_K", kQK_K)},
    {DType::kQ3_K, Quantized<BlockQ3_K>("q3_K", kQK_K)},
    {DType::kQ4_K, Quantized<BlockQ4_K>("q4_K", kQK_K)},
    {DType::kQ5_K, Quantized<BlockQ5_K>("q5_K", kQK_K)},
    {DType::kQ6_K, Quantized<BlockQ6_K>("q6_K", kQK_K)},
    {DType::kIQ4_NL, Quantized<BlockIQ4_NL>("iq4_nl", kQK4_NL)},
    {DType::kIQ4_XS, Quantized<BlockIQ4_XS>("iq4_xs", kQK_K)},
    {DType::kI32, {"i32", 1, 4, false, 4}},
    {DType::kBF16, {"bf16", 1, 2, false, 2}},
    {DType::kMXFP4, Quantized<BlockMXFP4>("mxfp4", kQKMXFP4)},
};

static_assert(std::size(kTypes) == std::size(kAllDTypes), "every DType needs its traits");

constexpr size_t MaxTypeId() {
  size_t max_id = 0;
  for (const TypeEntry& e : kTypes) max_id = std::max(max_id, static_cast<size_t>(e.type));
  return max_id;
}

// kTypes' traits indexed by enum value (a GGUF type id), for a lookup without a scan: the copy
// kernels ask for traits per row.
constexpr std::array<const DTypeTraits*, MaxTypeId() + 1> kByValue = [] {
  std::array<const DTypeTraits*, MaxTypeId() + 1> by_value{};
  for (const TypeEntry& e : kTypes) by_value[static_cast<size_t>(e.type)] = &e.traits;
  return by_value;
}();

}  // namespace

const DTypeTraits& Traits(DType type) {
  const auto id = static_cast<size_t>(type);
  const DTypeTraits* traits = id < kByValue.size() ? kByValue[id] : nullptr;
  // f32 only for invalid enum values (unreachable: DTypeFromId guards network input).
  return traits != nullptr ? *traits : kTypes[0].traits;
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
