// GgufReader: where the GGUF parser (gguf/gguf_file.h) gets its bytes. Two kinds: bytes
// already in memory (a mapping, or a buffer the caller keeps alive: GgufBytesReader) and a
// file descriptor read with pread through a window (GgufPreadReader: rpc-server's
// --model-dir, where a file that shrinks under a mapping would kill the server with SIGBUS).
// The parser asks for small ranges in increasing order, so the pread window is refilled about
// once per megabyte of header. A reader is used by one parse at a time: not thread-safe.
#ifndef TENSORGRID_GGUF_GGUF_READER_H_
#define TENSORGRID_GGUF_GGUF_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tg {

class GgufReader {
 public:
  virtual ~GgufReader() = default;

  // Bytes in the file.
  virtual uint64_t size() const = 0;
  // The `n` bytes at `offset` (the caller guarantees offset + n <= size()); the pointer stays
  // valid until the next call. Fails only when the bytes cannot be read (an I/O error, a file
  // that shrank under the reader).
  virtual absl::StatusOr<const uint8_t*> Bytes(uint64_t offset, size_t n) = 0;
  // The whole file when it is in memory (tensor data pointers point into it), else empty.
  virtual absl::Span<const uint8_t> in_memory() const { return {}; }
};

// Bytes in memory; the caller keeps them alive as long as the reader and what was parsed.
class GgufBytesReader : public GgufReader {
 public:
  explicit GgufBytesReader(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  absl::StatusOr<const uint8_t*> Bytes(uint64_t offset, size_t n) override {
    return bytes_.data() + offset;
  }
  absl::Span<const uint8_t> in_memory() const override { return bytes_; }

 private:
  absl::Span<const uint8_t> bytes_;
};

// A file open as `fd` (not owned, not closed) that the caller says has `size` bytes, read
// with pread, never mapped. A file that turns out shorter fails the read (OUT_OF_RANGE) instead
// of raising SIGBUS. `window_bytes` is how much one pread asks for (tests use tiny windows).
class GgufPreadReader : public GgufReader {
 public:
  static constexpr size_t kDefaultWindowBytes = size_t{1} << 20;

  GgufPreadReader(int fd, uint64_t size, std::string name,
                  size_t window_bytes = kDefaultWindowBytes)
      : fd_(fd), size_(size), name_(std::move(name)), window_bytes_(window_bytes) {}
  uint64_t size() const override { return size_; }
  absl::StatusOr<const uint8_t*> Bytes(uint64_t offset, size_t n) override;

 private:
  absl::Status Fill(uint64_t offset, size_t n);

  const int fd_;
  const uint64_t size_;
  const std::string name_;  // for error messages.
  const size_t window_bytes_;
  uint64_t window_start_ = 0;
  std::vector<uint8_t> window_;
};

}  // namespace tg

#endif  // TENSORGRID_GGUF_GGUF_READER_H_
