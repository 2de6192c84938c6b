// GgufWriter: lays out a GGUF v3 file (header, metadata, tensor infos, aligned tensor data)
// and streams it either into a byte vector or, atomically, into a file.
#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tg {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" as a little-endian u32.
constexpr uint32_t kGgufVersion = 3;
constexpr size_t kDefaultAlignment = 32;  // what readers assume without general.alignment.
constexpr char kAlignmentKey[] = "general.alignment";
constexpr size_t kMaxDims = 4;
constexpr size_t kMaxTensorNameBytes = 63;    // llama.cpp's GGML_MAX_NAME (64) minus the NUL.
constexpr size_t kFileBufferBytes = 1 << 20;  // batches the many small metadata writes.

size_t AlignUp(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// Any numeric alternative of a value, converted to T (strings read as 0).
template <typename T>
T NumberAs(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> T {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
          return T{};
        } else {
          return static_cast<T>(x);
        }
      },
      v.scalar);
}

// Collects the bytes in memory (Serialize).
class VectorSink {
 public:
  explicit VectorSink(std::vector<uint8_t>* out) : out_(*out) {}
  void Append(const void* data, size_t n) {
    if (n == 0) return;
    const size_t old = out_.size();
    out_.resize(old + n);
    std::memcpy(out_.data() + old, data, n);
  }
  size_t bytes() const { return out_.size(); }

 private:
  std::vector<uint8_t>& out_;
};

// Writes the bytes to a file descriptor through a buffer; remembers the first error.
class FdSink {
 public:
  explicit FdSink(int fd) : fd_(fd) { buffer_.reserve(kFileBufferBytes); }
  void Append(const void* data, size_t n) {
    bytes_ += n;
    if (buffer_.size() + n > kFileBufferBytes) Flush();
    if (n >= kFileBufferBytes) {
      WriteAll(static_cast<const uint8_t*>(data), n);  // large tensors skip the copy.
      return;
    }
    const uint8_t* p = static_cast<const uint8_t*>(data);
    buffer_.insert(buffer_.end(), p, p + n);
  }
  void Flush() {
    WriteAll(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  int error() const { return error_; }
  size_t bytes() const { return bytes_; }

 private:
  void WriteAll(const uint8_t* p, size_t n) {
    while (n > 0 && error_ == 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno != EINTR) error_ = errno;
        continue;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  int fd_;
  int error_ = 0;
  size_t bytes_ = 0;
  std::vector<uint8_t> buffer_;
};

template <typename Sink, typename T>
void Put(Sink& sink, T v) {
  sink.Append(&v, sizeof(v));
}

template <typename Sink>
void PutString(Sink& sink, absl::string_view s) {
  Put<Sink, uint64_t>(sink, s.size());
  sink.Append(s.data(), s.size());
}

template <typename Sink>
void PutZeros(Sink& sink, size_t n) {
  static constexpr uint8_t kZeros[256] = {};
  for (size_t done = 0; done < n;) {
    const size_t chunk = std::min(n - done, sizeof(kZeros));
    sink.Append(kZeros, chunk);
    done += chunk;
  }
}

// The payload of a value of `type` (the type itself is written by the caller).
template <typename Sink>
void PutValue(Sink& sink, GgufType type, const GgufValue& v) {
  switch (type) {
    case GgufType::kUint8:
      return Put(sink, NumberAs<uint8_t>(v));
    case GgufType::kInt8:
      return Put(sink, NumberAs<int8_t>(v));
    case GgufType::kUint16:
      return Put(sink, NumberAs<uint16_t>(v));
    case GgufType::kInt16:
      return Put(sink, NumberAs<int16_t>(v));
    case GgufType::kUint32:
      return Put(sink, NumberAs<uint32_t>(v));
    case GgufType::kInt32:
      return Put(sink, NumberAs<int32_t>(v));
    case GgufType::kUint64:
      return Put(sink, NumberAs<uint64_t>(v));
    case GgufType::kInt64:
      return Put(sink, NumberAs<int64_t>(v));
    case GgufType::kFloat32:
      return Put(sink, NumberAs<float>(v));
    case GgufType::kFloat64:
      return Put(sink, NumberAs<double>(v));
    case GgufType::kBool:
      return Put(sink, static_cast<uint8_t>(NumberAs<bool>(v) ? 1 : 0));
    case GgufType::kString: {
      const std::string* s = std::get_if<std::string>(&v.scalar);
      return PutString(sink, s != nullptr ? absl::string_view(*s) : absl::string_view());
    }
    case GgufType::kArray:
      Put(sink, static_cast<uint32_t>(v.elem_type));
      Put<Sink, uint64_t>(sink, v.array.size());
      for (const GgufValue& e : v.array) PutValue(sink, v.elem_type, e);
      return;
  }
}

// Bytes of a tensor of this shape; INVALID_ARGUMENT for a shape GgufFile would reject.
absl::StatusOr<uint64_t> TensorBytes(const std::string& what, DType type,
                                     absl::Span<const int64_t> ne) {
  if (ne.size() > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", ne.size(), " dimensions"));
  }
  for (int64_t n : ne) {
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat(what, " has a negative dimension"));
  }
  const int64_t ne0 = ne.empty() ? 1 : ne[0];
  if (ne0 % BlockSize(type) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " row length ", ne0,
                                                   " is not a multiple of the ", DTypeName(type),
                                                   " block size ", BlockSize(type)));
  }
  uint64_t nbytes = RowBytes(type, ne0);
  for (size_t d = 1; d < ne.size(); ++d) {
    if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(ne[d]), &nbytes)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is too large"));
    }
  }
  return nbytes;
}

GgufValue Scalar(GgufType type, decltype(GgufValue::scalar) scalar) {
  GgufValue v;
  v.type = type;
  v.scalar = std::move(scalar);
  return v;
}

// An array whose elements hold `values` widened to the variant alternative W.
template <typename W, typename T>
GgufValue Array(GgufType elem_type, absl::Span<const T> values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.elem_type = elem_type;
  v.array.reserve(values.size());
  for (const T& x : values) v.array.push_back(Scalar(elem_type, W(x)));
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Metadata

void GgufWriter::SetValue(absl::string_view key, GgufValue v) {
  for (auto& [k, old] : kv_) {
    if (k == key) {  // a second Set replaces the value and keeps the key's position.
      old = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::string(key), std::move(v));
}

void GgufWriter::SetU32(absl::string_view key, uint32_t v) {
  SetValue(key, Scalar(GgufType::kUint32, uint64_t{v}));
}
void GgufWriter::SetI32(absl::string_view key, int32_t v) {
  SetValue(key, Scalar(GgufType::kInt32, int64_t{v}));
}
void GgufWriter::SetU64(absl::string_view key, uint64_t v) {
  SetValue(key, Scalar(GgufType::kUint64, v));
}
void GgufWriter::SetF32(absl::string_view key, float v) {
  SetValue(key, Scalar(GgufType::kFloat32, double{v}));
}
void GgufWriter::SetBool(absl::string_view key, bool v) {
  SetValue(key, Scalar(GgufType::kBool, v));
}
void GgufWriter::SetString(absl::string_view key, absl::string_view v) {
  SetValue(key, Scalar(GgufType::kString, std::string(v)));
}
void GgufWriter::SetStringArray(absl::string_view key, absl::Span<const std::string> v) {
  SetValue(key, Array<std::string>(GgufType::kString, v));
}
void GgufWriter::SetF32Array(absl::string_view key, absl::Span<const float> v) {
  SetValue(key, Array<double>(GgufType::kFloat32, v));
}
void GgufWriter::SetI32Array(absl::string_view key, absl::Span<const int32_t> v) {
  SetValue(key, Array<int64_t>(GgufType::kInt32, v));
}

// ---------------------------------------------------------------------------------------------
// Tensors

absl::Status GgufWriter::AddTensor(absl::string_view name, DType type, absl::Span<const int64_t> ne,
                                   absl::Span<const uint8_t> data) {
  return AddTensor(name, type, ne, std::vector<uint8_t>(data.begin(), data.end()));
}

absl::Status GgufWriter::AddTensor(absl::string_view name, DType type, absl::Span<const int64_t> ne,
                                   std::vector<uint8_t>&& data) {
  const std::string what = absl::StrCat("tensor '", name, "'");
  if (name.size() > kMaxTensorNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " name is longer than ", kMaxTensorNameBytes, " bytes"));
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return absl::InvalidArgumentError(absl::StrCat("duplicate ", what));
  }
  absl::StatusOr<uint64_t> nbytes = TensorBytes(what, type, ne);
  if (!nbytes.ok()) return nbytes.status();
  if (data.size() != *nbytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", data.size(), " bytes of data, expected ", *nbytes));
  }
  tensors_.push_back(
      {std::string(name), type, std::vector<int64_t>(ne.begin(), ne.end()), std::move(data)});
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Output

template <typename Sink>
void GgufWriter::Emit(Sink& sink) const {
  const size_t alignment = std::max<size_t>(alignment_, 1);
  bool has_alignment_key = false;
  for (const auto& kv : kv_) has_alignment_key |= kv.first == kAlignmentKey;
  // A non-default alignment must be in the file, or readers would lay the data out wrongly.
  const bool add_alignment_key = !has_alignment_key && alignment != kDefaultAlignment;

  Put(sink, kGgufMagic);
  Put(sink, kGgufVersion);
  Put<Sink, uint64_t>(sink, tensors_.size());
  Put<Sink, uint64_t>(sink, kv_.size() + (add_alignment_key ? 1 : 0));
  if (add_alignment_key) {
    PutString(sink, kAlignmentKey);
    Put(sink, static_cast<uint32_t>(GgufType::kUint32));
    Put(sink, static_cast<uint32_t>(alignment));
  }
  for (const auto& [key, value] : kv_) {
    PutString(sink, key);
    Put(sink, static_cast<uint32_t>(value.type));
    PutValue(sink, value.type, value);
  }
  size_t offset = 0;  // of the next tensor, relative to the data section.
  for (const PendingTensor& t : tensors_) {
    PutString(sink, t.name);
    Put(sink, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) Put(sink, n);
    Put(sink, static_cast<uint32_t>(t.type));
    Put<Sink, uint64_t>(sink, offset);
    offset = AlignUp(offset + t.data.size(), alignment);
  }
  PutZeros(sink, AlignUp(sink.bytes(), alignment) - sink.bytes());
  for (const PendingTensor& t : tensors_) {
    sink.Append(t.data.data(), t.data.size());
    PutZeros(sink, AlignUp(t.data.size(), alignment) - t.data.size());
  }
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out;
  VectorSink sink(&out);
  Emit(sink);
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  if (!std::has_single_bit(alignment_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": alignment ", alignment_, " is not a power of two"));
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  }
  FdSink sink(fd);
  Emit(sink);
  sink.Flush();
  int err = sink.error();
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace tg
