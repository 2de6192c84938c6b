// Element types of tensors, bit-compatible with GGUF / ggml block layouts.
// The enum values are the GGUF type ids, so a GGUF tensor's type maps 1:1.
#ifndef TENSORGRID_CORE_DTYPE_H_
#define TENSORGRID_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI32 = 26,
  kBF16 = 30,
  kMXFP4 = 39,
};

// Every DType tensorgrid supports, in a stable order (for loops in tests and tools).
inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16,   DType::kI32,
                                       DType::kQ8_0, DType::kQ4_0,   DType::kQ4_K,   DType::kQ6_K,
                                       DType::kQ5_0, DType::kQ5_1,   DType::kQ5_K,   DType::kQ3_K,
                                       DType::kQ2_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

// Static facts about a type: a row of n elements takes n / block_size * block_bytes bytes.
struct DTypeTraits {
  const char* name;    // lower-case, as GGUF tools print it ("f32", "q4_K").
  int64_t block_size;  // elements per block (1 for plain types).
  size_t block_bytes;  // bytes per block.
  bool quantized;      // true for block-quantized types.
  size_t block_align;  // alignment a block's fields need (MXFP4 blocks are 17 bytes: 1).
};

const DTypeTraits& Traits(DType type);
inline const char* DTypeName(DType type) { return Traits(type).name; }
inline int64_t BlockSize(DType type) { return Traits(type).block_size; }
inline size_t BlockBytes(DType type) { return Traits(type).block_bytes; }
inline bool IsQuantized(DType type) { return Traits(type).quantized; }
inline size_t BlockAlignment(DType type) { return Traits(type).block_align; }

// Bytes of a row of n elements; n must be a multiple of BlockSize(type).
inline size_t RowBytes(DType type, int64_t n) {
  return static_cast<size_t>(n / BlockSize(type)) * BlockBytes(type);
}

// Maps a GGUF/ggml type id to a DType; UNIMPLEMENTED for ids tensorgrid does not support.
absl::StatusOr<DType> DTypeFromId(uint32_t id);
// Parses a name as printed by DTypeName (case-insensitive).
absl::StatusOr<DType> ParseDType(absl::string_view name);

}  // namespace tg

#endif  // TENSORGRID_CORE_DTYPE_H_
