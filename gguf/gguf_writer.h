// GgufWriter: builds a GGUF v3 file (metadata + tensors) in memory order and writes it
// atomically (temporary file + rename). Used by `tg-gguf synth` and by tests that need
// hand-made or hostile files. Not thread-safe.
#ifndef TENSORGRID_GGUF_GGUF_WRITER_H_
#define TENSORGRID_GGUF_GGUF_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "gguf/gguf_file.h"

namespace tg {

class GgufWriter {
 public:
  explicit GgufWriter(size_t alignment = 32) : alignment_(alignment) {}

  void SetU32(absl::string_view key, uint32_t v);
  void SetI32(absl::string_view key, int32_t v);
  void SetU64(absl::string_view key, uint64_t v);
  void SetF32(absl::string_view key, float v);
  void SetBool(absl::string_view key, bool v);
  void SetString(absl::string_view key, absl::string_view v);
  void SetStringArray(absl::string_view key, absl::Span<const std::string> v);
  void SetF32Array(absl::string_view key, absl::Span<const float> v);
  void SetI32Array(absl::string_view key, absl::Span<const int32_t> v);
  // A raw value of any type (nested arrays included), for tests.
  void SetValue(absl::string_view key, GgufValue v);

  // Adds a tensor; `data` must hold RowBytes(type, ne[0]) * ne[1] * ... bytes.
  absl::Status AddTensor(absl::string_view name, DType type, absl::Span<const int64_t> ne,
                         absl::Span<const uint8_t> data);
  // The same, taking ownership of the bytes (no copy: synthetic models are large).
  absl::Status AddTensor(absl::string_view name, DType type, absl::Span<const int64_t> ne,
                         std::vector<uint8_t>&& data);

  // The whole file as bytes, and written to a path (atomically).
  std::vector<uint8_t> Serialize() const;
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  // Sends the file's bytes, in order, to `sink` (a byte vector or a buffered file).
  template <typename Sink>
  void Emit(Sink& sink) const;

  size_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace tg

#endif  // TENSORGRID_GGUF_GGUF_WRITER_H_
