#include "core/op.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tg {
namespace {

constexpr absl::string_view kNames[] = {
    "NONE",    "GET_ROWS", "SET_ROWS", "MUL_MAT", "ADD",     "MUL",        "SCALE",
    "RMS_NORM", "ROPE",    "SOFT_MAX", "SILU",    "SWIGLU",  "CPY",        "CONT",
    "VIEW",    "RESHAPE",  "PERMUTE",  "TRANSPOSE", "FLASH_ATTN", "MUL_MAT_ID",
    "ARGMAX",  "SAMPLE",   "ARGSORT",  "TOP_K",   "SUM_ROWS", "DIV",
    "SWIGLU_OAI",
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Op::kCount));

}  // namespace

absl::string_view OpName(Op op) {
  const auto i = static_cast<size_t>(op);
  return i < static_cast<size_t>(Op::kCount) ? kNames[i] : "INVALID";
}

absl::StatusOr<Op> ParseOp(absl::string_view name) {
  for (size_t i = 1; i < static_cast<size_t>(Op::kCount); ++i) {
    if (absl::EqualsIgnoreCase(name, kNames[i])) return static_cast<Op>(i);
  }
  std::string known;
  for (size_t i = 1; i < static_cast<size_t>(Op::kCount); ++i) absl::StrAppend(&known, " ", kNames[i]);
  return absl::InvalidArgumentError(absl::StrCat("unknown op '", name, "' (known:", known, ")"));
}

uint64_t OpTableFingerprint() {
  constexpr uint64_t kOpParamsRevision = 4;  // 3: MUL_MAT_ID's expert range; 4: SWIGLU_OAI.
  uint64_t h = 1469598103934665603ull;  // FNV-1a.
  auto mix = [&h](absl::string_view bytes) {
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  };
  for (size_t i = 0; i < static_cast<size_t>(Op::kCount); ++i) mix(absl::StrCat(i, "=", kNames[i], ";"));
  mix(absl::StrCat("rev", kOpParamsRevision));
  return h;
}

bool IsViewOp(Op op) {
  return op == Op::kView || op == Op::kReshape || op == Op::kPermute || op == Op::kTranspose;
}

}  // namespace tg
