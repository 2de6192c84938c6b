// GgufFile: the GGUF v2/v3 parser and validator (GgufParser), the read-only mapping behind
// Open(), and the typed metadata getters. Every byte read goes through a bounds-checked
// cursor over a GgufReader (memory or pread) and every size computation is overflow-checked, so a
// hostile file yields a one-line status naming the problem, never a crash or an unbounded
// allocation.
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/enum_names.h"
#include "core/status_macros.h"

namespace tg {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader reads little-endian fields in place");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32.
constexpr uint32_t kMinVersion = 2;          // v1 used 32-bit counts and lengths; nobody writes it.
constexpr uint32_t kMaxVersion = 3;
constexpr size_t kDefaultAlignment = 32;  // the spec's default when general.alignment is absent.
constexpr char kAlignmentKey[] = "general.alignment";
constexpr int kMaxDims = 4;                 // GGML_MAX_DIMS.
constexpr size_t kMaxTensorNameBytes = 63;  // GGML_MAX_NAME (64) minus the NUL: llama.cpp's limit.
constexpr size_t kMaxKeyBytes = 65535;      // the spec: keys are at most 2^16 - 1 bytes.
constexpr uint32_t kLastGgufType = static_cast<uint32_t>(GgufType::kFloat64);
constexpr char kMemoryName[] = "<memory>";  // how errors name a buffer from FromBytes().

using u128 = unsigned __int128;  // exact sums of three u64 values (offset arithmetic).

std::string U128ToString(u128 v) {
  if (v <= std::numeric_limits<uint64_t>::max()) return absl::StrCat(static_cast<uint64_t>(v));
  std::string digits;
  while (v > 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  return digits;
}

// Bytes a value of this type takes at least in the file (arrays: the header of an empty one).
size_t MinEncodedBytes(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString:  // the u64 length.
      return 8;
    case GgufType::kArray:  // u32 element type + u64 count.
      return 12;
  }
  return 1;
}

bool IsInteger(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kInt8 || t == GgufType::kUint16 ||
         t == GgufType::kInt16 || t == GgufType::kUint32 || t == GgufType::kInt32 ||
         t == GgufType::kUint64 || t == GgufType::kInt64;
}

bool IsFloat(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

// "a string", "an int32", "an array of float32": for type-mismatch messages.
std::string Describe(const GgufValue& v) {
  if (v.type == GgufType::kArray) return absl::StrCat("an array of ", GgufTypeName(v.elem_type));
  const absl::string_view name = GgufTypeName(v.type);
  return absl::StrCat(name[0] == 'i' ? "an " : "a ", name);
}

// The integer in a value of any integer type, if it lies in [lo, hi].
bool IntegerInRange(const GgufValue& v, int64_t lo, uint64_t hi, int64_t* out_signed,
                    uint64_t* out_unsigned) {
  if (const uint64_t* u = std::get_if<uint64_t>(&v.scalar)) {
    if (*u > hi) return false;
    *out_unsigned = *u;
    *out_signed = static_cast<int64_t>(*u);  // only used by callers whose hi <= INT64_MAX.
    return true;
  }
  if (const int64_t* s = std::get_if<int64_t>(&v.scalar)) {
    if (*s < lo || (*s > 0 && static_cast<uint64_t>(*s) > hi)) return false;
    *out_signed = *s;
    *out_unsigned = static_cast<uint64_t>(*s);
    return true;
  }
  return false;
}

std::string IntegerToString(const GgufValue& v) {
  if (const uint64_t* u = std::get_if<uint64_t>(&v.scalar)) return absl::StrCat(*u);
  if (const int64_t* s = std::get_if<int64_t>(&v.scalar)) return absl::StrCat(*s);
  return "?";
}

constexpr EnumName<GgufType> kGgufTypes[] = {
    {GgufType::kUint8, "uint8"},     {GgufType::kInt8, "int8"},     {GgufType::kUint16, "uint16"},
    {GgufType::kInt16, "int16"},     {GgufType::kUint32, "uint32"}, {GgufType::kInt32, "int32"},
    {GgufType::kFloat32, "float32"}, {GgufType::kBool, "bool"},     {GgufType::kString, "string"},
    {GgufType::kArray, "array"},     {GgufType::kUint64, "uint64"}, {GgufType::kInt64, "int64"},
    {GgufType::kFloat64, "float64"},
};

}  // namespace

absl::string_view GgufTypeName(GgufType type) { return NameOf(kGgufTypes, type, "unknown"); }

// Reads a whole GGUF image into a GgufFile, validating as it goes. One instance per parse.
class GgufParser {
 public:
  GgufParser(GgufFile* file, GgufReader& reader, const GgufReadOptions& options)
      : file_(*file), reader_(reader), options_(options), limits_(options.limits) {}

  absl::Status Parse() {
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    TG_RETURN_IF_ERROR(ParseHeader(&n_tensors, &n_kv));
    TG_RETURN_IF_ERROR(ParseMetadata(n_kv));
    TG_RETURN_IF_ERROR(ApplyAlignment());
    TG_RETURN_IF_ERROR(ParseTensorInfos(n_tensors));
    TG_RETURN_IF_ERROR(LocateTensorData());
    return CheckOverlaps();
  }

 private:
  // ---- errors: one line, prefixed with the file's name.
  absl::Status Invalid(absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(file_.path_, ": ", msg));
  }
  // A read that failed: the reader's error if it had one, else the file ended first.
  absl::Status Truncated(const absl::AlphaNum& need, absl::string_view what) const {
    if (!io_error_.ok()) return io_error_;
    return absl::OutOfRangeError(absl::StrCat(file_.path_, ": truncated: ", what, " needs ", need,
                                              " bytes at offset ", pos_, " but the file has ",
                                              file_.size_, " bytes"));
  }

  // ---- bounds-checked little-endian reads; false when the file ends first.
  size_t Remaining() const { return file_.size_ - pos_; }
  // The n bytes at pos_ (n <= Remaining()), or null after keeping the reader's error.
  const uint8_t* Fetch(size_t n) {
    static constexpr uint8_t kNothing = 0;
    if (n == 0) return &kNothing;
    absl::StatusOr<const uint8_t*> p = reader_.Bytes(pos_, n);
    if (!p.ok()) {
      io_error_ = p.status();
      return nullptr;
    }
    return *p;
  }
  template <typename T>
  bool Read(T* out) {
    if (Remaining() < sizeof(T)) return false;
    const uint8_t* p = Fetch(sizeof(T));
    if (p == nullptr) return false;
    std::memcpy(out, p, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  template <typename T>
  absl::Status ReadOr(T* out, absl::string_view what) {
    return Read(out) ? absl::OkStatus() : Truncated(sizeof(T), what);
  }
  // Reads a T whose bytes the caller has checked, stored as the variant alternative W.
  template <typename T, typename W>
  absl::Status ReadWidened(GgufValue* out) {
    T v{};
    if (!Read(&v)) return Truncated(sizeof(T), "a metadata value");
    out->scalar = static_cast<W>(v);
    return absl::OkStatus();
  }

  absl::Status ParseHeader(uint64_t* n_tensors, uint64_t* n_kv);
  absl::Status ParseMetadata(uint64_t n_kv);
  // `what` names the string in an error message; it is only called on failure. A null `out`
  // skips the string's bytes, and a null GgufValue* skips a value (checked all the same).
  absl::Status ParseString(uint64_t max_bytes, absl::FunctionRef<std::string()> what,
                           std::string* out);
  absl::Status ParseValue(GgufType type, int depth, absl::string_view key, GgufValue* out);
  absl::Status ParseArray(int depth, absl::string_view key, GgufValue* out);
  absl::Status ParseScalar(GgufType type, absl::string_view key, GgufValue* out);
  absl::Status ReadType(absl::string_view what, GgufType* out);
  absl::Status ApplyAlignment();
  absl::Status ParseTensorInfos(uint64_t n_tensors);
  // `known` is false for a type tensorgrid does not know (with skip_unknown_types).
  absl::Status ParseTensorInfo(GgufTensorInfo* info, bool* known);
  absl::Status ParseShape(GgufTensorInfo* info);
  absl::Status ParseTensorOffset(absl::string_view what, GgufTensorInfo* info);
  absl::Status LocateTensorData();
  absl::Status CheckOverlaps() const;

  GgufFile& file_;
  GgufReader& reader_;
  const GgufReadOptions& options_;
  const GgufLimits& limits_;
  size_t pos_ = 0;
  uint64_t total_array_elems_ = 0;  // <= limits_.max_total_array_elems.
  absl::Status io_error_;           // the reader's, once a read failed.
};

absl::Status GgufParser::ParseHeader(uint64_t* n_tensors, uint64_t* n_kv) {
  uint32_t magic = 0;
  TG_RETURN_IF_ERROR(ReadOr(&magic, "the magic"));
  if (magic != kGgufMagic) {
    return Invalid(
        absl::StrCat("bad magic 0x", absl::Hex(magic, absl::kZeroPad8), " (not a GGUF file)"));
  }
  uint32_t version = 0;
  TG_RETURN_IF_ERROR(ReadOr(&version, "the version"));
  if (__builtin_bswap32(version) >= kMinVersion && __builtin_bswap32(version) <= kMaxVersion) {
    return Invalid(absl::StrCat("big-endian GGUF (version ", __builtin_bswap32(version),
                                ") is not supported"));
  }
  if (version == 1) {
    return Invalid("GGUF version 1 is not supported (only 2 and 3; re-convert the model)");
  }
  if (version < kMinVersion || version > kMaxVersion) {
    return Invalid(absl::StrCat("unsupported GGUF version ", version, " (only 2 and 3)"));
  }
  file_.version_ = version;
  TG_RETURN_IF_ERROR(ReadOr(n_tensors, "the tensor count"));
  TG_RETURN_IF_ERROR(ReadOr(n_kv, "the metadata count"));
  if (*n_tensors > limits_.max_tensors) {
    return Invalid(
        absl::StrCat("tensor count ", *n_tensors, " exceeds the limit ", limits_.max_tensors));
  }
  if (*n_kv > limits_.max_kv) {
    return Invalid(absl::StrCat("metadata count ", *n_kv, " exceeds the limit ", limits_.max_kv));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ParseString(uint64_t max_bytes, absl::FunctionRef<std::string()> what,
                                     std::string* out) {
  uint64_t len = 0;
  if (!Read(&len)) return Truncated(sizeof(len), absl::StrCat(what(), " length"));
  if (len > max_bytes) {
    return Invalid(absl::StrCat(what(), " length ", len, " exceeds the limit ", max_bytes));
  }
  if (len > Remaining()) return Truncated(len, what());
  if (out != nullptr) {
    const uint8_t* p = Fetch(len);
    if (p == nullptr) return io_error_;
    out->assign(reinterpret_cast<const char*>(p), len);
  }
  pos_ += len;
  return absl::OkStatus();
}

absl::Status GgufParser::ReadType(absl::string_view what, GgufType* out) {
  uint32_t raw = 0;
  TG_RETURN_IF_ERROR(ReadOr(&raw, what));
  if (raw > kLastGgufType) return Invalid(absl::StrCat(what, " ", raw, " is unknown"));
  *out = static_cast<GgufType>(raw);
  return absl::OkStatus();
}

absl::Status GgufParser::ParseMetadata(uint64_t n_kv) {
  absl::flat_hash_set<std::string> skipped;  // keys whose values are not kept.
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    TG_RETURN_IF_ERROR(ParseString(
        kMaxKeyBytes, [i] { return absl::StrCat("key #", i); }, &key));
    GgufType type;
    TG_RETURN_IF_ERROR(ReadType(absl::StrCat("key '", key, "' value type"), &type));
    const bool keep = options_.keep_metadata || key == kAlignmentKey;
    GgufValue value;
    TG_RETURN_IF_ERROR(ParseValue(type, 0, key, keep ? &value : nullptr));
    if (file_.kv_index_.contains(key) || skipped.contains(key)) {
      return Invalid(absl::StrCat("duplicate key '", key, "'"));
    }
    if (!keep) {
      skipped.insert(std::move(key));
      continue;
    }
    file_.kv_index_.emplace(key, file_.kv_.size());
    file_.kv_.emplace_back(std::move(key), std::move(value));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ParseValue(GgufType type, int depth, absl::string_view key,
                                    GgufValue* out) {
  if (type == GgufType::kArray) {
    if (out != nullptr) out->type = type;
    return ParseArray(depth + 1, key, out);
  }
  if (type == GgufType::kString) {
    std::string str;
    absl::Status s = ParseString(
        limits_.max_string_bytes, [key] { return absl::StrCat("key '", key, "' string"); },
        out != nullptr ? &str : nullptr);
    if (out != nullptr) {
      out->type = type;
      out->scalar = std::move(str);
    }
    return s;
  }
  GgufValue scratch;  // a skipped scalar is still read: a bool must be 0 or 1.
  GgufValue* v = out != nullptr ? out : &scratch;
  v->type = type;
  return ParseScalar(type, key, v);
}

absl::Status GgufParser::ParseScalar(GgufType type, absl::string_view key, GgufValue* out) {
  // Array elements were size-checked by the caller; this re-check is cheap and local.
  if (Remaining() < MinEncodedBytes(type)) {
    return Truncated(MinEncodedBytes(type), absl::StrCat("key '", key, "' value"));
  }
  switch (type) {
    case GgufType::kUint8:
      return ReadWidened<uint8_t, uint64_t>(out);
    case GgufType::kInt8:
      return ReadWidened<int8_t, int64_t>(out);
    case GgufType::kUint16:
      return ReadWidened<uint16_t, uint64_t>(out);
    case GgufType::kInt16:
      return ReadWidened<int16_t, int64_t>(out);
    case GgufType::kUint32:
      return ReadWidened<uint32_t, uint64_t>(out);
    case GgufType::kInt32:
      return ReadWidened<int32_t, int64_t>(out);
    case GgufType::kUint64:
      return ReadWidened<uint64_t, uint64_t>(out);
    case GgufType::kInt64:
      return ReadWidened<int64_t, int64_t>(out);
    case GgufType::kFloat32:
      return ReadWidened<float, double>(out);
    case GgufType::kFloat64:
      return ReadWidened<double, double>(out);
    case GgufType::kBool: {
      uint8_t b = 0;
      if (!Read(&b)) return Truncated(1, absl::StrCat("key '", key, "' value"));
      if (b > 1) return Invalid(absl::StrCat("key '", key, "' bool value ", b, " is not 0 or 1"));
      out->scalar = b == 1;
      return absl::OkStatus();
    }
    case GgufType::kString:
    case GgufType::kArray:
      break;
  }
  return Invalid(absl::StrCat("key '", key, "': internal error, not a scalar"));
}

absl::Status GgufParser::ParseArray(int depth, absl::string_view key, GgufValue* out) {
  if (depth > limits_.max_nesting) {
    return Invalid(
        absl::StrCat("key '", key, "' has arrays nested more than ", limits_.max_nesting, " deep"));
  }
  GgufType elem_type;
  TG_RETURN_IF_ERROR(ReadType(absl::StrCat("key '", key, "' array element type"), &elem_type));
  uint64_t count = 0;
  TG_RETURN_IF_ERROR(ReadOr(&count, absl::StrCat("key '", key, "' array count")));
  if (count > limits_.max_array_elems) {
    return Invalid(absl::StrCat("key '", key, "' array has ", count,
                                " elements, more than the limit ", limits_.max_array_elems));
  }
  if (count > limits_.max_total_array_elems - total_array_elems_) {
    return Invalid(absl::StrCat("key '", key, "' array of ", count,
                                " elements takes the file's arrays past the limit of ",
                                limits_.max_total_array_elems, " elements in all"));
  }
  total_array_elems_ += count;
  // Every element takes at least MinEncodedBytes in the file, so this bounds the allocation
  // below by the file's size before anything is reserved.
  const size_t min_bytes = MinEncodedBytes(elem_type);
  if (count > Remaining() / min_bytes) {
    return Truncated(
        U128ToString(u128{count} * min_bytes),
        absl::StrCat("key '", key, "' array of ", count, " ", GgufTypeName(elem_type)));
  }
  if (out == nullptr) {
    // Skipped: fixed-size elements other than bool (whose bytes must be 0 or 1) need no look.
    if (elem_type != GgufType::kString && elem_type != GgufType::kArray &&
        elem_type != GgufType::kBool) {
      pos_ += count * min_bytes;  // checked against Remaining() above.
      return absl::OkStatus();
    }
    for (uint64_t i = 0; i < count; ++i) {
      TG_RETURN_IF_ERROR(ParseValue(elem_type, depth, key, nullptr));
    }
    return absl::OkStatus();
  }
  out->elem_type = elem_type;
  out->array.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    TG_RETURN_IF_ERROR(ParseValue(elem_type, depth, key, &out->array[i]));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ApplyAlignment() {
  const GgufValue* v = file_.Find(kAlignmentKey);
  if (v == nullptr) {
    file_.alignment_ = kDefaultAlignment;
    return absl::OkStatus();
  }
  if (v->type != GgufType::kUint32) {
    return Invalid(
        absl::StrCat("key '", kAlignmentKey, "' is ", Describe(*v), ", expected a uint32"));
  }
  const uint64_t a = std::get<uint64_t>(v->scalar);
  if (!std::has_single_bit(a)) {
    return Invalid(absl::StrCat(kAlignmentKey, " ", a, " is not a power of two"));
  }
  file_.alignment_ = a;
  return absl::OkStatus();
}

absl::Status GgufParser::ParseTensorInfos(uint64_t n_tensors) {
  // Reserve only what the remaining bytes could describe (a tensor info is >= 24 bytes).
  constexpr size_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
  file_.tensors_.reserve(std::min<uint64_t>(n_tensors, Remaining() / kMinTensorInfoBytes));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info;
    TG_RETURN_IF_ERROR(ParseString(
        kMaxTensorNameBytes, [i] { return absl::StrCat("tensor #", i, " name"); }, &info.name));
    bool known = true;
    TG_RETURN_IF_ERROR(ParseTensorInfo(&info, &known));
    if (!known) {
      ++file_.unknown_type_tensors_;
      continue;
    }
    if (!file_.tensor_index_.emplace(info.name, file_.tensors_.size()).second) {
      return Invalid(absl::StrCat("duplicate tensor name '", info.name, "'"));
    }
    file_.tensors_.push_back(std::move(info));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ParseTensorInfo(GgufTensorInfo* info, bool* known) {
  const std::string what = absl::StrCat("tensor '", info->name, "'");
  TG_RETURN_IF_ERROR(ParseShape(info));
  uint32_t type_id = 0;
  TG_RETURN_IF_ERROR(ReadOr(&type_id, absl::StrCat(what, " type")));
  absl::StatusOr<DType> type = DTypeFromId(type_id);
  *known = type.ok();
  if (!*known && !options_.skip_unknown_types) {
    return absl::UnimplementedError(
        absl::StrCat(file_.path_, ": ", what, " has unsupported type id ", type_id));
  }
  if (!*known) return ParseTensorOffset(what, info);  // its size is unknown.
  info->type = *type;
  if (info->ne[0] % BlockSize(info->type) != 0) {
    return Invalid(absl::StrCat(what, " row length ", info->ne[0], " is not a multiple of the ",
                                DTypeName(info->type), " block size ", BlockSize(info->type)));
  }
  // Elements fit in int64 (ParseShape), so a row's bytes fit too (<= 4 bytes per element).
  uint64_t nbytes = RowBytes(info->type, info->ne[0]);
  for (int d = 1; d < kMaxDims; ++d) {
    if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(info->ne[d]), &nbytes)) {
      return Invalid(absl::StrCat(what, " byte size overflows"));
    }
  }
  info->nbytes = nbytes;
  return ParseTensorOffset(what, info);
}

absl::Status GgufParser::ParseTensorOffset(absl::string_view what, GgufTensorInfo* info) {
  TG_RETURN_IF_ERROR(ReadOr(&info->offset, absl::StrCat(what, " offset")));
  if (info->offset % file_.alignment_ != 0) {
    return Invalid(absl::StrCat(what, " offset ", info->offset,
                                " is not a multiple of the alignment ", file_.alignment_));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ParseShape(GgufTensorInfo* info) {
  const std::string what = absl::StrCat("tensor '", info->name, "'");
  uint32_t n_dims = 0;
  TG_RETURN_IF_ERROR(ReadOr(&n_dims, absl::StrCat(what, " dimension count")));
  if (n_dims > kMaxDims) {
    return Invalid(absl::StrCat(what, " has ", n_dims, " dimensions (at most ", kMaxDims, ")"));
  }
  info->n_dims = static_cast<int>(n_dims);
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t raw = 0;
    TG_RETURN_IF_ERROR(ReadOr(&raw, absl::StrCat(what, " dimension ", d)));
    const int64_t ne = static_cast<int64_t>(raw);
    if (ne < 0) return Invalid(absl::StrCat(what, " dimension ", d, " is negative (", ne, ")"));
    info->ne[d] = ne;
    if (__builtin_mul_overflow(elements, ne, &elements)) {
      return Invalid(absl::StrCat(what, " shape [",
                                  absl::StrJoin(absl::MakeConstSpan(info->ne, d + 1), ", "),
                                  "] has more than 2^63 elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufParser::LocateTensorData() {
  // The data section starts at the next multiple of the alignment (pos_ <= size, no overflow).
  const u128 data_start = (u128{pos_} + file_.alignment_ - 1) / file_.alignment_ * file_.alignment_;
  const uint8_t* base = reader_.in_memory().data();  // null when read with pread.
  for (GgufTensorInfo& t : file_.tensors_) {
    const u128 begin = data_start + t.offset;
    const u128 end = begin + t.nbytes;
    if (end > file_.size_) {
      return absl::OutOfRangeError(absl::StrCat(
          file_.path_, ": tensor '", t.name, "' data [", U128ToString(begin), ", ",
          U128ToString(end), ") lies past the end of the file (", file_.size_, " bytes)"));
    }
    if (base != nullptr) t.data = base + static_cast<size_t>(begin);
  }
  file_.data_offset_ = static_cast<uint64_t>(std::min<u128>(data_start, u128{file_.size_}));
  if (base != nullptr) file_.data_section_ = base + file_.data_offset_;
  return absl::OkStatus();
}

absl::Status GgufParser::CheckOverlaps() const {
  std::vector<const GgufTensorInfo*> order;
  order.reserve(file_.tensors_.size());
  for (const GgufTensorInfo& t : file_.tensors_) {
    if (t.nbytes > 0) order.push_back(&t);  // empty tensors occupy nothing.
  }
  std::sort(order.begin(), order.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensorInfo& a = *order[i - 1];
    const GgufTensorInfo& b = *order[i];
    if (a.offset + a.nbytes > b.offset) {  // both ends are inside the file: no overflow.
      return Invalid(absl::StrCat("tensors '", a.name, "' [", a.offset, ", ", a.offset + a.nbytes,
                                  ") and '", b.name, "' [", b.offset, ", ", b.offset + b.nbytes,
                                  ") overlap (offsets in the data section)"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Construction

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Read(GgufReader& reader, absl::string_view name,
                                                         const GgufReadOptions& options) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::string(name);
  file->base_ = reader.in_memory().data();
  file->size_ = reader.size();
  TG_RETURN_IF_ERROR(GgufParser(file.get(), reader, options).Parse());
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(absl::Span<const uint8_t> bytes,
                                                              const GgufLimits& limits) {
  GgufBytesReader reader(bytes);
  return Read(reader, kMemoryName, {.limits = limits});
}

namespace {

absl::Status OpenError(const std::string& path, absl::string_view op, int err) {
  const std::string msg = absl::StrCat(path, ": cannot ", op, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                         const GgufLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block.
  if (fd < 0) return OpenError(path, "open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return OpenError(path, "stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {  // mmap rejects length 0; an empty file fails as truncated below.
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return OpenError(path, "mmap", err);
    }
    file->base_ = static_cast<const uint8_t*>(p);
    file->mapped_ = true;
  }
  ::close(fd);  // the mapping keeps the file alive.
  GgufBytesReader reader(file->bytes());
  TG_RETURN_IF_ERROR(GgufParser(file.get(), reader, {.limits = limits}).Parse());
  return file;
}

void GgufFile::ReleaseTensorPages() const {
  if (!mapped_ || data_section_ == nullptr) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGE_SIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data_section_) + page - 1) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(base_) + size_;
  // A hint: on failure the pages merely stay mapped.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

GgufFile::~GgufFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

// ---------------------------------------------------------------------------------------------
// Lookups and typed getters

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::StatusOr<const GgufValue*> Lookup(const GgufFile& f, absl::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing key '", key, "'"));
  return v;
}

absl::Status Mismatch(absl::string_view key, const GgufValue& v, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("key '", key, "' is ", Describe(v), ", expected ", expected));
}

// Integer getters: the value (or array element) as an integer within [lo, hi].
absl::Status CheckInteger(absl::string_view key, const GgufValue& v, int64_t lo, uint64_t hi,
                          absl::string_view type_name, int64_t* s, uint64_t* u) {
  if (!IsInteger(v.type)) return Mismatch(key, v, "an integer");
  if (!IntegerInRange(v, lo, hi, s, u)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", key, "' value ", IntegerToString(v), " does not fit in ", type_name));
  }
  return absl::OkStatus();
}

absl::StatusOr<const GgufValue*> LookupArray(const GgufFile& f, absl::string_view key,
                                             bool (*elem_ok)(GgufType),
                                             absl::string_view expected) {
  absl::StatusOr<const GgufValue*> v = Lookup(f, key);
  if (!v.ok()) return v.status();
  if ((*v)->type != GgufType::kArray || !elem_ok((*v)->elem_type)) {
    return Mismatch(key, **v, expected);
  }
  return v;
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  if ((*v)->type != GgufType::kString) return Mismatch(key, **v, "a string");
  return std::get<std::string>((*v)->scalar);
}

absl::StatusOr<uint32_t> GgufFile::GetU32(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  int64_t s = 0;
  uint64_t u = 0;
  TG_RETURN_IF_ERROR(
      CheckInteger(key, **v, 0, std::numeric_limits<uint32_t>::max(), "uint32", &s, &u));
  return static_cast<uint32_t>(u);
}

absl::StatusOr<int64_t> GgufFile::GetI64(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  int64_t s = 0;
  uint64_t u = 0;
  TG_RETURN_IF_ERROR(CheckInteger(key, **v, std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max(), "int64", &s, &u));
  return s;
}

absl::StatusOr<float> GgufFile::GetF32(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  if (!IsFloat((*v)->type)) return Mismatch(key, **v, "a float");
  return static_cast<float>(std::get<double>((*v)->scalar));
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> v = Lookup(*this, key);
  if (!v.ok()) return v.status();
  if ((*v)->type != GgufType::kBool) return Mismatch(key, **v, "a bool");
  return std::get<bool>((*v)->scalar);
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> v = LookupArray(
      *this, key, [](GgufType t) { return t == GgufType::kString; }, "an array of string");
  if (!v.ok()) return v.status();
  std::vector<std::string> out;
  out.reserve((*v)->array.size());
  for (const GgufValue& e : (*v)->array) out.push_back(std::get<std::string>(e.scalar));
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::GetF32Array(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> v = LookupArray(*this, key, IsFloat, "an array of float");
  if (!v.ok()) return v.status();
  std::vector<float> out;
  out.reserve((*v)->array.size());
  for (const GgufValue& e : (*v)->array)
    out.push_back(static_cast<float>(std::get<double>(e.scalar)));
  return out;
}

absl::StatusOr<std::vector<int32_t>> GgufFile::GetI32Array(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> v = LookupArray(*this, key, IsInteger, "an array of integer");
  if (!v.ok()) return v.status();
  std::vector<int32_t> out;
  out.reserve((*v)->array.size());
  for (const GgufValue& e : (*v)->array) {
    int64_t s = 0;
    uint64_t u = 0;
    TG_RETURN_IF_ERROR(CheckInteger(key, e, std::numeric_limits<int32_t>::min(),
                                    std::numeric_limits<int32_t>::max(), "int32", &s, &u));
    out.push_back(static_cast<int32_t>(s));
  }
  return out;
}

}  // namespace tg
