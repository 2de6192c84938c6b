// GgufFile: a read-only, validated view of a GGUF v2/v3 file: mmap'ed (Open), bytes in memory
// (FromBytes) or read with pread from a descriptor (Read with a GgufPreadReader: no tensor data
// pointers then). The one GGUF parser of the tree: models/, rpc-server's --model-dir index and
// the tools all read through it. It checks everything it reads — magic, version, counts within
// limits, string and array lengths inside the file, every metadata type (nested arrays too),
// general.alignment, tensor types/shapes/offsets, tensor data inside the file and not overlapping —
// and returns INVALID_ARGUMENT / OUT_OF_RANGE naming the problem for a truncated, corrupt or
// hostile file (UNIMPLEMENTED for a tensor type tensorgrid does not support). After Open()
// succeeds, accessors never fail on structure, only on missing keys or wrong types. Thread-safe for
// reading.
#ifndef TENSORGRID_GGUF_GGUF_FILE_H_
#define TENSORGRID_GGUF_GGUF_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "gguf/gguf_reader.h"

namespace tg {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
absl::string_view GgufTypeName(GgufType type);

// One metadata value. Scalars are widened (integers to int64/uint64, floats to double);
// arrays keep their element type.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string> scalar;
  GgufType elem_type = GgufType::kUint8;  // for kArray.
  std::vector<GgufValue> array;           // for kArray (elements have type elem_type).
};

struct GgufTensorInfo {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  uint64_t offset = 0;            // relative to the data section.
  size_t nbytes = 0;              // RowBytes(type, ne0) * ne1 * ne2 * ne3.
  const uint8_t* data = nullptr;  // inside the mapping; null when read with pread.
};

// Limits a hostile file cannot push past (each well above any real model).
struct GgufLimits {
  uint64_t max_tensors = 1 << 20;
  uint64_t max_kv = 1 << 20;
  uint64_t max_string_bytes = 1 << 26;
  uint64_t max_array_elems = 1 << 28;  // vocabularies of a few 100k entries, merges...
  // All arrays together (nested ones too): each parsed element costs ~80 bytes of memory, so
  // this bounds what a small hostile file can make the parser allocate.
  uint64_t max_total_array_elems = 1 << 28;
  int max_nesting = 8;
};

// How Read() parses (Open and FromBytes use the defaults).
struct GgufReadOptions {
  GgufLimits limits;
  // false: metadata values are checked as they are read but not kept; metadata() holds only
  // general.alignment (rpc-server's index needs the tensor table, not the vocabulary).
  bool keep_metadata = true;
  // false: a tensor of a type tensorgrid does not know fails the parse (UNIMPLEMENTED). true:
  // it is left out of tensors() and counted (unknown_type_tensors()); its offset is still
  // checked for alignment, but its extent is unknown.
  bool skip_unknown_types = false;
};

class GgufFile {
 public:
  // Maps and validates a file.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                        const GgufLimits& limits = {});
  // Validates bytes already in memory (the caller keeps them alive): fuzzing, tests.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(absl::Span<const uint8_t> bytes,
                                                             const GgufLimits& limits = {});
  // Parses what `reader` reads; `name` prefixes error messages (and is path()). When the reader
  // has the file in memory, tensor data pointers point into it (the caller keeps it alive);
  // otherwise they, data_section() and bytes() are null/empty and data_offset() locates the
  // tensor data. Errors as for Open; the reader's own errors (I/O, a file that shrank) as is.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Read(GgufReader& reader, absl::string_view name,
                                                        const GgufReadOptions& options = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* Find(absl::string_view key) const;
  bool Has(absl::string_view key) const { return Find(key) != nullptr; }
  // Typed getters: NOT_FOUND for a missing key, INVALID_ARGUMENT naming key and actual type
  // for a mismatch. Integer getters accept any integer type whose value fits.
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<uint32_t> GetU32(absl::string_view key) const;
  absl::StatusOr<int64_t> GetI64(absl::string_view key) const;
  absl::StatusOr<float> GetF32(absl::string_view key) const;  // float32 or float64.
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(absl::string_view key) const;
  absl::StatusOr<std::vector<float>> GetF32Array(absl::string_view key) const;
  absl::StatusOr<std::vector<int32_t>> GetI32Array(absl::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(absl::string_view name) const;
  // Tensors left out because their type is unknown (GgufReadOptions::skip_unknown_types).
  uint64_t unknown_type_tensors() const { return unknown_type_tensors_; }
  // File offset of the tensor data section: the bytes before it are the header, metadata and
  // tensor table (the file's identity, proto/model_identity.h).
  uint64_t data_offset() const { return data_offset_; }
  // Start of the tensor data section inside the mapping, and the whole mapping (null and empty
  // when the file was read with pread).
  const uint8_t* data_section() const { return data_section_; }
  absl::Span<const uint8_t> bytes() const {
    return base_ != nullptr ? absl::Span<const uint8_t>(base_, size_) : absl::Span<const uint8_t>();
  }
  // Unmaps the tensor data's pages from this process (they stay in the page cache, and a later
  // read maps them in again), e.g. once the weights are copied elsewhere, so that the process
  // does not hold the file resident twice. No-op for a file read with pread.
  void ReleaseTensorPages() const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  absl::flat_hash_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
  uint64_t unknown_type_tensors_ = 0;
  uint64_t data_offset_ = 0;
  const uint8_t* data_section_ = nullptr;
};

}  // namespace tg

#endif  // TENSORGRID_GGUF_GGUF_FILE_H_
