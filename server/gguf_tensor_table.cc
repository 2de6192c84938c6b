#include "server/gguf_tensor_table.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace tg::server {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read little-endian.
constexpr uint64_t kDefaultAlignment = 32;   // the spec's, when general.alignment is absent.
constexpr char kAlignmentKey[] = "general.alignment";
constexpr uint32_t kTypeUint32 = 4;
constexpr uint32_t kTypeString = 8;
constexpr uint32_t kTypeArray = 9;
constexpr uint32_t kMaxValueType = 12;
// Limits no real model reaches (models/gguf_file.h has the same ones).
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
constexpr uint64_t kMaxKv = uint64_t{1} << 20;
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 26;
constexpr int kMaxNesting = 8;
constexpr int kMaxDims = 4;
// pread granularity: metadata (a vocabulary) is megabytes of small fields.
constexpr size_t kWindowBytes = size_t{1} << 20;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("not a valid GGUF file: ", what));
}

// Sequential reads through a window refilled with pread.
class Reader {
 public:
  Reader(int fd, uint64_t size) : fd_(fd), size_(size) {}
  uint64_t pos() const { return pos_; }

  absl::Status Bytes(void* out, size_t n, absl::string_view what) {
    if (n > size_ - pos_) {
      return Invalid(absl::StrCat(what, " at byte ", pos_, " runs past the end (", size_, ")"));
    }
    auto* dst = static_cast<uint8_t*>(out);
    while (n > 0) {
      if (pos_ < win_start_ || pos_ >= win_start_ + win_.size()) TG_RETURN_IF_ERROR(Fill());
      const size_t k = std::min<uint64_t>(n, win_start_ + win_.size() - pos_);
      if (dst != nullptr) std::memcpy(dst, win_.data() + (pos_ - win_start_), k);
      if (dst != nullptr) dst += k;
      pos_ += k;
      n -= k;
    }
    return absl::OkStatus();
  }
  absl::Status Skip(uint64_t n, absl::string_view what) {
    if (n > size_ - pos_) {
      return Invalid(absl::StrCat(what, " at byte ", pos_, " runs past the end (", size_, ")"));
    }
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Read(T* v, absl::string_view what) {
    return Bytes(v, sizeof(T), what);
  }

 private:
  absl::Status Fill() {
    win_.resize(std::min<uint64_t>(kWindowBytes, size_ - pos_));
    size_t got = 0;
    while (got < win_.size()) {
      const ssize_t n = pread(fd_, win_.data() + got, win_.size() - got, pos_ + got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::UnavailableError(absl::StrCat("read failed: ", std::strerror(errno)));
      if (n == 0) return Invalid("the file shrank while being read");
      got += static_cast<size_t>(n);
    }
    win_start_ = pos_;
    return absl::OkStatus();
  }

  const int fd_;
  const uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t win_start_ = 0;
  std::string win_;
};

absl::Status SkipString(Reader& r, absl::string_view what, std::string* out = nullptr) {
  uint64_t len = 0;
  TG_RETURN_IF_ERROR(r.Read(&len, what));
  if (len > kMaxStringBytes) return Invalid(absl::StrCat(what, " of ", len, " bytes is too long"));
  if (out == nullptr) return r.Skip(len, what);
  out->resize(len);
  return r.Bytes(out->data(), len, what);
}

size_t ScalarBytes(uint32_t type) {
  static constexpr size_t kBytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return kBytes[type];
}

absl::Status SkipValue(Reader& r, uint32_t type, int depth) {
  if (type > kMaxValueType) return Invalid(absl::StrCat("metadata value type ", type));
  if (type == kTypeString) return SkipString(r, "metadata string");
  if (type != kTypeArray) return r.Skip(ScalarBytes(type), "metadata value");
  if (depth >= kMaxNesting) return Invalid("metadata arrays nested too deep");
  uint32_t elem = 0;
  uint64_t count = 0;
  TG_RETURN_IF_ERROR(r.Read(&elem, "array type"));
  TG_RETURN_IF_ERROR(r.Read(&count, "array count"));
  if (elem > kMaxValueType) return Invalid(absl::StrCat("array element type ", elem));
  if (elem != kTypeString && elem != kTypeArray) {
    if (count > UINT64_MAX / 8) return Invalid("array count overflows");
    return r.Skip(count * ScalarBytes(elem), "array");
  }
  for (uint64_t i = 0; i < count; ++i) TG_RETURN_IF_ERROR(SkipValue(r, elem, depth + 1));
  return absl::OkStatus();
}

// Reads the metadata, keeping only general.alignment.
absl::StatusOr<uint64_t> ReadMetadata(Reader& r, uint64_t n_kv) {
  uint64_t alignment = kDefaultAlignment;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    TG_RETURN_IF_ERROR(SkipString(r, "metadata key", &key));
    uint32_t type = 0;
    TG_RETURN_IF_ERROR(r.Read(&type, "metadata type"));
    if (key == kAlignmentKey && type == kTypeUint32) {
      uint32_t a = 0;
      TG_RETURN_IF_ERROR(r.Read(&a, kAlignmentKey));
      if (!std::has_single_bit(a)) return Invalid(absl::StrCat(kAlignmentKey, " ", a));
      alignment = a;
      continue;
    }
    TG_RETURN_IF_ERROR(SkipValue(r, type, 0));
  }
  return alignment;
}

// One tensor info: its extent relative to the data section, or size 0 for an unknown type.
absl::StatusOr<rpc::FileRange> ReadTensorInfo(Reader& r, uint64_t alignment, bool* known) {
  TG_RETURN_IF_ERROR(SkipString(r, "tensor name"));
  uint32_t n_dims = 0;
  TG_RETURN_IF_ERROR(r.Read(&n_dims, "tensor dimension count"));
  if (n_dims > kMaxDims) return Invalid(absl::StrCat("tensor with ", n_dims, " dimensions"));
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  for (uint32_t d = 0; d < n_dims; ++d) {
    TG_RETURN_IF_ERROR(r.Read(&ne[d], "tensor dimension"));
    if (ne[d] < 0) return Invalid("negative tensor dimension");
  }
  uint32_t type_id = 0;
  rpc::FileRange extent;
  TG_RETURN_IF_ERROR(r.Read(&type_id, "tensor type"));
  TG_RETURN_IF_ERROR(r.Read(&extent.offset, "tensor offset"));
  if (extent.offset % alignment != 0) return Invalid("tensor offset not aligned");
  absl::StatusOr<DType> type = DTypeFromId(type_id);
  *known = type.ok();
  if (!*known) return extent;
  if (ne[0] % BlockSize(*type) != 0) return Invalid("tensor row not a whole number of blocks");
  uint64_t bytes = RowBytes(*type, ne[0]);
  for (int d = 1; d < kMaxDims; ++d) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(ne[d]), &bytes)) {
      return Invalid("tensor byte size overflows");
    }
  }
  extent.size = bytes;
  return extent;
}

}  // namespace

absl::StatusOr<GgufTensorTable> ReadGgufTensorTable(int fd, uint64_t size) {
  Reader r(fd, size);
  uint32_t magic = 0, version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  TG_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kGgufMagic) return Invalid("bad magic");
  TG_RETURN_IF_ERROR(r.Read(&version, "version"));
  if (version != 2 && version != 3) return Invalid(absl::StrCat("version ", version));
  TG_RETURN_IF_ERROR(r.Read(&n_tensors, "tensor count"));
  TG_RETURN_IF_ERROR(r.Read(&n_kv, "metadata count"));
  if (n_tensors > kMaxTensors || n_kv > kMaxKv) return Invalid("too many tensors or keys");
  TG_ASSIGN_OR_RETURN(const uint64_t alignment, ReadMetadata(r, n_kv));
  GgufTensorTable table;
  std::vector<rpc::FileRange> relative;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    bool known = false;
    TG_ASSIGN_OR_RETURN(rpc::FileRange t, ReadTensorInfo(r, alignment, &known));
    if (!known) ++table.unknown_type_tensors;
    if (known) relative.push_back(t);
  }
  table.data_start = (r.pos() + alignment - 1) / alignment * alignment;
  if (table.data_start > size) return Invalid("the tensor data section starts past the end");
  for (const rpc::FileRange& t : relative) {
    const uint64_t room = size - table.data_start;
    if (t.offset > room || t.size > room - t.offset) {
      return Invalid(absl::StrCat("tensor data [", t.offset, ", +", t.size, ") past the end"));
    }
    table.tensors.push_back({table.data_start + t.offset, t.size});
  }
  return table;
}

}  // namespace tg::server
