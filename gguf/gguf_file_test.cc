// GGUF reader and writer (gguf/gguf_file.h, gguf/gguf_writer.h): round trips of every
// metadata type and tensor type, the real stories260K model, and hostile files made by
// mutating the bytes of a valid one (each must fail with the right message, never crash).
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

using ::testing::HasSubstr;
using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------------------------
// Helpers

GgufValue Scalar(GgufType type, decltype(GgufValue::scalar) scalar) {
  GgufValue v;
  v.type = type;
  v.scalar = std::move(scalar);
  return v;
}

GgufValue ArrayOf(GgufType elem_type, std::vector<GgufValue> elems) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.elem_type = elem_type;
  v.array = std::move(elems);
  return v;
}

// `depth` arrays nested inside each other around one int32.
GgufValue Nested(int depth) {
  GgufValue v = ArrayOf(GgufType::kInt32, {Scalar(GgufType::kInt32, int64_t{7})});
  for (int d = 1; d < depth; ++d) v = ArrayOf(GgufType::kArray, {v});
  return v;
}

void ExpectSameValue(const GgufValue& want, const GgufValue& got, const std::string& where) {
  ASSERT_EQ(want.type, got.type) << where;
  if (want.type != GgufType::kArray) {
    EXPECT_EQ(want.scalar, got.scalar) << where;
    return;
  }
  ASSERT_EQ(want.elem_type, got.elem_type) << where;
  ASSERT_EQ(want.array.size(), got.array.size()) << where;
  for (size_t i = 0; i < want.array.size(); ++i) {
    ExpectSameValue(want.array[i], got.array[i], absl::StrCat(where, "[", i, "]"));
  }
}

Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// The status of parsing `bytes` through pread (a memfd, a window of `window` bytes so that
// fields straddle refills), named as FromBytes names memory.
absl::Status ParseWithPread(const Bytes& bytes, const GgufLimits& limits, bool keep_metadata,
                            size_t window) {
  const int fd = memfd_create("gguf_file_test", MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError("memfd_create failed");
  const bool written =
      bytes.empty() || write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  GgufPreadReader reader(fd, bytes.size(), "<memory>", window);
  absl::Status s = written ? GgufFile::Read(reader, "<memory>",
                                            {.limits = limits, .keep_metadata = keep_metadata})
                                 .status()
                           : absl::InternalError("write to the memfd failed");
  close(fd);
  return s;
}

// The status of parsing `bytes` from memory; reading them with pread (keeping the metadata or
// not) must end the same way, message included.
absl::Status Parse(const Bytes& bytes, const GgufLimits& limits = {}) {
  // An exact-size heap copy, so that AddressSanitizer sees any read past the end.
  Bytes copy(bytes.begin(), bytes.end());
  const absl::Status s = GgufFile::FromBytes(copy, limits).status();
  EXPECT_EQ(ParseWithPread(bytes, limits, /*keep_metadata=*/true, 5), s);
  EXPECT_EQ(ParseWithPread(bytes, limits, /*keep_metadata=*/false, 64), s);
  return s;
}

// Offset just past the GGUF string `s` (u64 length + bytes) in `bytes`: where the fields
// that follow a key or a tensor name start.
size_t After(const Bytes& bytes, const std::string& s) {
  Bytes pattern(8 + s.size());
  const uint64_t len = s.size();
  std::memcpy(pattern.data(), &len, 8);
  std::memcpy(pattern.data() + 8, s.data(), s.size());
  auto it = std::search(bytes.begin(), bytes.end(), pattern.begin(), pattern.end());
  EXPECT_NE(it, bytes.end()) << "no string '" << s << "' in the file";
  return static_cast<size_t>(it - bytes.begin()) + pattern.size();
}

template <typename T>
void Poke(Bytes& bytes, size_t pos, T v) {
  ASSERT_LE(pos + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + pos, &v, sizeof(T));
}

// Field offsets inside a tensor info, after its name.
size_t NeAt(size_t info, int d) { return info + 4 + 8 * d; }
size_t TypeAt(size_t info, int n_dims) { return info + 4 + 8 * n_dims; }
size_t OffsetAt(size_t info, int n_dims) { return info + 8 + 8 * n_dims; }

// A small valid file: a few keys of different types and three tensors; the data of the last
// tensor ends exactly at the end of the file (no trailing padding), so every proper prefix is
// invalid.
Bytes SmallFile() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("aa", 7);
  w.SetU32("ab", 8);
  w.SetString("str", "hello");
  w.SetI32Array("arr", std::vector<int32_t>{1, 2, 3});
  w.SetBool("flag", true);
  EXPECT_TRUE(w.AddTensor("t0", DType::kF32, std::vector<int64_t>{8, 4}, RandomBytes(128, 1)).ok());
  EXPECT_TRUE(
      w.AddTensor("t1", DType::kQ8_0, std::vector<int64_t>{32, 2}, RandomBytes(68, 2)).ok());
  EXPECT_TRUE(w.AddTensor("t2", DType::kF32, std::vector<int64_t>{8}, RandomBytes(32, 3)).ok());
  return w.Serialize();
}

void ExpectError(const Bytes& bytes, absl::StatusCode code, const std::string& text,
                 const GgufLimits& limits = {}) {
  const absl::Status s = Parse(bytes, limits);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(text));
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos) << "not one line: " << s;
}

// SmallFile() with the T at `pos` set to `v` fails to parse with `code` and `text`.
template <typename T>
void ExpectPokedError(size_t pos, T v, absl::StatusCode code, const std::string& text) {
  Bytes b = SmallFile();
  Poke<T>(b, pos, v);
  ExpectError(b, code, text);
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/gguf_test_", ::getpid(), "_", name);
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(GgufRoundTrip, EveryValueType) {
  std::vector<std::pair<std::string, GgufValue>> values = {
      {"u8", Scalar(GgufType::kUint8, uint64_t{255})},
      {"i8", Scalar(GgufType::kInt8, int64_t{-128})},
      {"u16", Scalar(GgufType::kUint16, uint64_t{65535})},
      {"i16", Scalar(GgufType::kInt16, int64_t{-32768})},
      {"u32", Scalar(GgufType::kUint32, uint64_t{4294967295u})},
      {"i32", Scalar(GgufType::kInt32, int64_t{-2147483647 - 1})},
      {"u64", Scalar(GgufType::kUint64, std::numeric_limits<uint64_t>::max())},
      {"i64", Scalar(GgufType::kInt64, std::numeric_limits<int64_t>::min())},
      {"f32", Scalar(GgufType::kFloat32, 1.5)},
      {"f64", Scalar(GgufType::kFloat64, 0.1)},
      {"bool0", Scalar(GgufType::kBool, false)},
      {"bool1", Scalar(GgufType::kBool, true)},
      {"str", Scalar(GgufType::kString, std::string("h\xC3\xA9llo \0 nul", 13))},
      {"empty_str", Scalar(GgufType::kString, std::string())},
      {"arr_u8", ArrayOf(GgufType::kUint8, {Scalar(GgufType::kUint8, uint64_t{1}),
                                            Scalar(GgufType::kUint8, uint64_t{2})})},
      {"arr_f64", ArrayOf(GgufType::kFloat64, {Scalar(GgufType::kFloat64, -2.25)})},
      {"arr_bool",
       ArrayOf(GgufType::kBool, {Scalar(GgufType::kBool, true), Scalar(GgufType::kBool, false)})},
      {"arr_str", ArrayOf(GgufType::kString, {Scalar(GgufType::kString, std::string("a")),
                                              Scalar(GgufType::kString, std::string())})},
      {"arr_empty", ArrayOf(GgufType::kInt64, {})},
      {"arr_arr", ArrayOf(GgufType::kArray, {ArrayOf(GgufType::kString,
                                                     {Scalar(GgufType::kString, std::string("x"))}),
                                             ArrayOf(GgufType::kUint16, {})})},
      {"nested8", Nested(8)},
  };
  GgufWriter w;
  for (const auto& [k, v] : values) w.SetValue(k, v);
  const Bytes bytes = w.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->alignment(), 32u);
  ASSERT_EQ((*f)->metadata().size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ((*f)->metadata()[i].first, values[i].first);  // file order is kept.
    ExpectSameValue(values[i].second, (*f)->metadata()[i].second, values[i].first);
  }
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufRoundTrip, ConvenienceSettersAndGetters) {
  GgufWriter w;
  w.SetU32("u32", 123);
  w.SetI32("i32", -5);
  w.SetU64("u64", uint64_t{1} << 40);
  w.SetF32("f32", 1e-5f);
  w.SetBool("b", true);
  w.SetString("s", "llama");
  w.SetStringArray("sa", std::vector<std::string>{"<unk>", "<s>", "\xE2\x96\x81the"});
  w.SetF32Array("fa", std::vector<float>{0.0f, -1.5f, 3.25f});
  w.SetI32Array("ia", std::vector<int32_t>{1, -2, 6});
  w.SetU32("u32", 124);  // replaces the earlier value in place.
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(w.Serialize());
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.metadata().size(), 9u);
  EXPECT_EQ(*g.GetU32("u32"), 124u);
  EXPECT_EQ(*g.GetI64("i32"), -5);
  EXPECT_EQ(*g.GetI64("u64"), int64_t{1} << 40);
  EXPECT_EQ(*g.GetF32("f32"), 1e-5f);
  EXPECT_TRUE(*g.GetBool("b"));
  EXPECT_EQ(*g.GetString("s"), "llama");
  EXPECT_EQ(*g.GetStringArray("sa"), (std::vector<std::string>{"<unk>", "<s>", "\xE2\x96\x81the"}));
  EXPECT_EQ(*g.GetF32Array("fa"), (std::vector<float>{0.0f, -1.5f, 3.25f}));
  EXPECT_EQ(*g.GetI32Array("ia"), (std::vector<int32_t>{1, -2, 6}));
  EXPECT_TRUE(g.Has("sa"));
  EXPECT_FALSE(g.Has("nope"));
}

TEST(GgufRoundTrip, GetterErrors) {
  GgufWriter w;
  w.SetString("x", "text");
  w.SetI32("neg", -1);
  w.SetU64("big", uint64_t{1} << 40);
  w.SetValue("max_u64", Scalar(GgufType::kUint64, std::numeric_limits<uint64_t>::max()));
  w.SetValue("u8", Scalar(GgufType::kUint8, uint64_t{200}));
  w.SetF32Array("fa", std::vector<float>{1.0f});
  w.SetValue("big_elems",
             ArrayOf(GgufType::kUint64, {Scalar(GgufType::kUint64, uint64_t{1} << 33)}));
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(w.Serialize());
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;

  absl::Status missing = g.GetU32("llama.block_count").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "missing key 'llama.block_count'");
  absl::Status wrong = g.GetU32("x").status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.message(), "key 'x' is a string, expected an integer");
  EXPECT_EQ(g.GetString("neg").status().message(), "key 'neg' is an int32, expected a string");
  EXPECT_EQ(g.GetU32("neg").status().message(), "key 'neg' value -1 does not fit in uint32");
  EXPECT_EQ(g.GetU32("big").status().message(),
            "key 'big' value 1099511627776 does not fit in uint32");
  EXPECT_FALSE(g.GetI64("max_u64").ok());
  EXPECT_EQ(*g.GetU32("u8"), 200u);  // any integer type that fits.
  EXPECT_EQ(g.GetF32("x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetBool("u8").status().message(), "key 'u8' is a uint8, expected a bool");
  EXPECT_EQ(g.GetStringArray("fa").status().message(),
            "key 'fa' is an array of float32, expected an array of string");
  EXPECT_EQ(g.GetI32Array("x").status().message(),
            "key 'x' is a string, expected an array of integer");
  EXPECT_FALSE(g.GetI32Array("big_elems").ok());
  EXPECT_EQ(g.GetF32Array("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufRoundTrip, TensorsOfEveryDType) {
  GgufWriter w;
  std::vector<Bytes> data;
  for (DType type : kAllDTypes) {
    const std::vector<int64_t> ne = {2 * BlockSize(type), 3, 1, 2};
    data.push_back(RandomBytes(RowBytes(type, ne[0]) * 6, static_cast<uint32_t>(type)));
    ASSERT_TRUE(w.AddTensor(absl::StrCat("t_", DTypeName(type)), type, ne, data.back()).ok());
  }
  ASSERT_TRUE(w.AddTensor("vec", DType::kF32, std::vector<int64_t>{5}, RandomBytes(20, 9)).ok());
  ASSERT_TRUE(w.AddTensor("empty", DType::kF32, std::vector<int64_t>{0, 4}, Bytes{}).ok());
  const Bytes bytes = w.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  ASSERT_EQ(g.tensors().size(), std::size(kAllDTypes) + 2);
  for (size_t i = 0; i < std::size(kAllDTypes); ++i) {
    const DType type = kAllDTypes[i];
    const GgufTensorInfo* t = g.FindTensor(absl::StrCat("t_", DTypeName(type)));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, type);
    EXPECT_EQ(t->n_dims, 4);
    EXPECT_EQ(t->ne[0], 2 * BlockSize(type));
    EXPECT_EQ(t->ne[1], 3);
    EXPECT_EQ(t->ne[3], 2);
    ASSERT_EQ(t->nbytes, data[i].size());
    EXPECT_EQ(t->offset % 32, 0u);
    EXPECT_EQ(t->data, g.data_section() + t->offset);
    EXPECT_EQ(0, std::memcmp(t->data, data[i].data(), t->nbytes)) << DTypeName(type);
  }
  const GgufTensorInfo* vec = g.FindTensor("vec");
  ASSERT_NE(vec, nullptr);
  EXPECT_EQ(vec->n_dims, 1);
  EXPECT_EQ(vec->ne[1], 1);
  EXPECT_EQ(g.FindTensor("empty")->nbytes, 0u);
  EXPECT_EQ(g.FindTensor("nope"), nullptr);
  EXPECT_EQ((g.data_section() - bytes.data()) % 32, 0);
}

TEST(GgufRoundTrip, CustomAlignmentIsWrittenAndUsed) {
  GgufWriter w(64);
  ASSERT_TRUE(w.AddTensor("a", DType::kF32, std::vector<int64_t>{3}, RandomBytes(12, 1)).ok());
  ASSERT_TRUE(w.AddTensor("b", DType::kF32, std::vector<int64_t>{3}, RandomBytes(12, 2)).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(w.Serialize());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ(*(*f)->GetU32("general.alignment"), 64u);
  EXPECT_EQ((*f)->FindTensor("b")->offset, 64u);
}

TEST(GgufWriter, RejectsBadTensors) {
  GgufWriter w;
  const Bytes four(4);
  EXPECT_FALSE(w.AddTensor("q", DType::kQ8_0, std::vector<int64_t>{33}, Bytes(34)).ok());
  EXPECT_FALSE(w.AddTensor("n", DType::kF32, std::vector<int64_t>{-1}, Bytes{}).ok());
  EXPECT_FALSE(w.AddTensor("d", DType::kF32, std::vector<int64_t>{1, 1, 1, 1, 1}, four).ok());
  EXPECT_FALSE(w.AddTensor("s", DType::kF32, std::vector<int64_t>{2}, four).ok());  // 8 needed.
  EXPECT_FALSE(w.AddTensor(std::string(64, 'x'), DType::kF32, std::vector<int64_t>{1}, four).ok());
  EXPECT_TRUE(w.AddTensor("ok", DType::kF32, std::vector<int64_t>{1}, four).ok());
  EXPECT_FALSE(w.AddTensor("ok", DType::kF32, std::vector<int64_t>{1}, four).ok());
  EXPECT_FALSE(GgufWriter(24).WriteFile(TempPath("bad_alignment.gguf")).ok());
}

TEST(GgufFileIo, WriteFileThenOpen) {
  const std::string path = TempPath("roundtrip.gguf");
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  ASSERT_TRUE(w.AddTensor("t", DType::kF32, std::vector<int64_t>{4}, RandomBytes(16, 5)).ok());
  ASSERT_TRUE(w.WriteFile(path).ok());
  EXPECT_NE(::access(absl::StrCat(path, ".tmp.", ::getpid()).c_str(), F_OK), 0);  // renamed.
  {
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->path(), path);
    EXPECT_EQ((*f)->file_size(), w.Serialize().size());
    EXPECT_EQ(0, std::memcmp((*f)->bytes().data(), w.Serialize().data(), (*f)->file_size()));
    EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  }
  std::remove(path.c_str());
}

// Read() over pread without keeping the metadata (rpc-server's --model-dir): the tensors and
// the data offset are the mapped parse's, only general.alignment is kept, nothing points into
// memory that is not there.
TEST(GgufFileIo, PreadWithoutMetadata) {
  GgufWriter w(64);
  w.SetString("general.architecture", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", std::vector<std::string>(300, "tok"));
  w.SetValue("flags", ArrayOf(GgufType::kBool, {Scalar(GgufType::kBool, true)}));
  ASSERT_TRUE(w.AddTensor("a", DType::kF32, std::vector<int64_t>{4}, RandomBytes(16, 1)).ok());
  ASSERT_TRUE(w.AddTensor("b", DType::kQ8_0, std::vector<int64_t>{32}, RandomBytes(34, 2)).ok());
  const std::string path = TempPath("pread.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> mapped = GgufFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  GgufPreadReader reader(fd, (*mapped)->file_size(), path, 16);
  absl::StatusOr<std::unique_ptr<GgufFile>> read =
      GgufFile::Read(reader, path, {.keep_metadata = false});
  ::close(fd);
  ASSERT_TRUE(read.ok()) << read.status();
  const GgufFile& f = **read;
  ASSERT_EQ(f.metadata().size(), 1u);
  EXPECT_EQ(f.metadata()[0].first, "general.alignment");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_FALSE(f.Has("tokenizer.ggml.tokens"));
  EXPECT_EQ(f.data_offset(),
            static_cast<uint64_t>((*mapped)->data_section() - (*mapped)->bytes().data()));
  EXPECT_EQ(f.data_section(), nullptr);
  EXPECT_TRUE(f.bytes().empty());
  EXPECT_EQ(f.file_size(), (*mapped)->file_size());
  ASSERT_EQ(f.tensors().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const GgufTensorInfo& want = (*mapped)->tensors()[i];
    const GgufTensorInfo& got = f.tensors()[i];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.type, want.type);
    EXPECT_EQ(got.offset, want.offset);
    EXPECT_EQ(got.nbytes, want.nbytes);
    EXPECT_EQ(got.data, nullptr);
  }
  std::remove(path.c_str());
}

TEST(GgufFileIo, OpenErrors) {
  absl::Status missing = GgufFile::Open("/nonexistent/model.gguf").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("/nonexistent/model.gguf: cannot open"));
  EXPECT_THAT(std::string(GgufFile::Open("/tmp").status().message()),
              HasSubstr("not a regular file"));
  const std::string empty = TempPath("empty.gguf");
  std::fclose(std::fopen(empty.c_str(), "wb"));
  absl::Status s = GgufFile::Open(empty).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat(empty, ": truncated")));
  std::remove(empty.c_str());
}

// ---------------------------------------------------------------------------------------------
// The real model

TEST(GgufRealModel, Stories260K) {
  const std::string path = TG_DEMO_MODEL;  // tests/CMakeLists.txt sets it on tg_testlib.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    std::printf("skipping: %s not found (set TG_SHARED_DIR)\n", path.c_str());
    GTEST_SKIP() << path << " not found";
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.file_size(), 1185376u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*g.GetU32("llama.block_count"), 5u);
  EXPECT_EQ(*g.GetU32("llama.embedding_length"), 64u);
  EXPECT_EQ(*g.GetU32("llama.feed_forward_length"), 172u);
  EXPECT_EQ(*g.GetU32("llama.attention.head_count"), 8u);
  EXPECT_EQ(*g.GetU32("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(*g.GetU32("llama.rope.dimension_count"), 8u);
  EXPECT_EQ(*g.GetU32("llama.context_length"), 2048u);
  EXPECT_FLOAT_EQ(*g.GetF32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(*g.GetU32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*g.GetU32("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(*g.GetU32("tokenizer.ggml.unknown_token_id"), 0u);
  absl::StatusOr<std::vector<std::string>> tokens = g.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[3], "<0x00>");
  EXPECT_EQ(g.GetF32Array("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ((*g.GetI32Array("tokenizer.ggml.token_type"))[3], 6);  // a byte token.

  // token_embd + output_norm + output, and 9 tensors per block.
  EXPECT_EQ(g.tensors().size(), 3u + 5u * 9u);
  const GgufTensorInfo* embd = g.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, DType::kF32);
  EXPECT_EQ(embd->n_dims, 2);
  EXPECT_EQ(embd->ne[0], 64);
  EXPECT_EQ(embd->ne[1], 512);
  EXPECT_EQ(embd->nbytes, 64u * 512u * 4u);
  ASSERT_NE(g.FindTensor("output.weight"), nullptr);
  EXPECT_EQ(g.FindTensor("blk.4.ffn_down.weight")->ne[0], 172);
  EXPECT_EQ(g.FindTensor("blk.0.attn_k.weight")->ne[1], 32);  // 4 KV heads of 8.
  size_t total = 0;
  for (const GgufTensorInfo& t : g.tensors()) {
    EXPECT_EQ(t.type, DType::kF32) << t.name;
    total += t.nbytes;
  }
  EXPECT_LE(static_cast<size_t>(g.data_section() - g.bytes().data()) + total, g.file_size());
}

// ---------------------------------------------------------------------------------------------
// Hostile files

TEST(GgufHostile, SmallFileIsValid) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(SmallFile());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 3u);
  const GgufTensorInfo& last = (*f)->tensors().back();
  EXPECT_EQ(last.data + last.nbytes, (*f)->bytes().data() + (*f)->file_size());
}

TEST(GgufHostile, EveryPrefixFailsCleanly) {
  const Bytes bytes = SmallFile();
  for (size_t len = 0; len < bytes.size(); ++len) {
    const absl::Status s = Parse(Bytes(bytes.begin(), bytes.begin() + len));
    ASSERT_FALSE(s.ok()) << "prefix of " << len << " bytes parsed";
    ASSERT_TRUE(s.code() == absl::StatusCode::kOutOfRange ||
                s.code() == absl::StatusCode::kInvalidArgument)
        << s;
  }
  ExpectError(Bytes(bytes.begin(), bytes.begin() + 10), absl::StatusCode::kOutOfRange,
              "<memory>: truncated: the tensor count needs 8 bytes at offset 8");
}

TEST(GgufHostile, BadMagicAndVersion) {
  Bytes b = SmallFile();
  Poke<uint32_t>(b, 0, 0x46554746);
  ExpectError(b, absl::StatusCode::kInvalidArgument, "bad magic 0x46554746 (not a GGUF file)");
  b = SmallFile();
  Poke<uint32_t>(b, 4, 1);
  ExpectError(b, absl::StatusCode::kInvalidArgument, "GGUF version 1 is not supported");
  Poke<uint32_t>(b, 4, 99);
  ExpectError(b, absl::StatusCode::kInvalidArgument, "unsupported GGUF version 99 (only 2 and 3)");
  Poke<uint32_t>(b, 4, 0x03000000);
  ExpectError(b, absl::StatusCode::kInvalidArgument, "big-endian GGUF (version 3)");
  Poke<uint32_t>(b, 4, 2);  // v2 has the same layout as v3.
  EXPECT_TRUE(Parse(b).ok());
}

TEST(GgufHostile, HugeCounts) {
  Bytes b = SmallFile();
  Poke<uint64_t>(b, 8, uint64_t{1} << 40);
  ExpectError(b, absl::StatusCode::kInvalidArgument,
              "tensor count 1099511627776 exceeds the limit 1048576");
  Poke<uint64_t>(b, 8, 1000);  // within the limit: the data is read as tensor infos.
  EXPECT_FALSE(Parse(b).ok());
  Bytes header = GgufWriter().Serialize();
  header.resize(24);
  Poke<uint64_t>(header, 8, 1000);  // within the limit, but the file ends first.
  ExpectError(header, absl::StatusCode::kOutOfRange,
              "truncated: tensor #0 name length needs 8 bytes at offset 24");
  b = SmallFile();
  Poke<uint64_t>(b, 16, ~uint64_t{0});
  ExpectError(b, absl::StatusCode::kInvalidArgument, "metadata count 18446744073709551615");
  b = SmallFile();
  Poke<uint64_t>(b, After(b, "arr") + 8, uint64_t{1} << 40);
  ExpectError(b, absl::StatusCode::kInvalidArgument,
              "key 'arr' array has 1099511627776 elements, more than the limit 268435456");
  Poke<uint64_t>(b, After(b, "arr") + 8, uint64_t{1} << 27);
  ExpectError(b, absl::StatusCode::kOutOfRange,
              "truncated: key 'arr' array of 134217728 int32 needs 536870912 bytes");
  GgufLimits small;
  small.max_array_elems = 2;
  ExpectError(SmallFile(), absl::StatusCode::kInvalidArgument, "more than the limit 2", small);
  GgufLimits total;
  total.max_total_array_elems = 4;
  GgufWriter w;
  w.SetI32Array("a", std::vector<int32_t>{1, 2, 3});
  w.SetValue("b", ArrayOf(GgufType::kArray, {ArrayOf(GgufType::kInt8, {})}));  // 1 element.
  EXPECT_TRUE(Parse(w.Serialize(), total).ok());
  w.SetI32Array("c", std::vector<int32_t>{4});
  ExpectError(w.Serialize(), absl::StatusCode::kInvalidArgument,
              "key 'c' array of 1 elements takes the file's arrays past the limit of 4 elements "
              "in all",
              total);
}

TEST(GgufHostile, HugeStringLengths) {
  Bytes b = SmallFile();
  Poke<uint64_t>(b, After(b, "str") + 4, uint64_t{1} << 62);
  ExpectError(b, absl::StatusCode::kInvalidArgument,
              "key 'str' string length 4611686018427387904 exceeds the limit 67108864");
  Poke<uint64_t>(b, After(b, "str") + 4, 1 << 20);
  ExpectError(b, absl::StatusCode::kOutOfRange, "truncated: key 'str' string needs 1048576 bytes");
  b = SmallFile();
  Poke<uint64_t>(b, 24, ~uint64_t{0});  // the first key's length.
  ExpectError(b, absl::StatusCode::kInvalidArgument, "key #0 length 18446744073709551615");
  b = SmallFile();
  Poke<uint64_t>(b, After(b, "t1") - 10, 64);  // t1's name length.
  ExpectError(b, absl::StatusCode::kInvalidArgument,
              "tensor #1 name length 64 exceeds the limit 63");
}

TEST(GgufHostile, BadMetadataTypes) {
  const Bytes small = SmallFile();
  ExpectPokedError<uint32_t>(After(small, "aa"), 13, absl::StatusCode::kInvalidArgument,
                             "key 'aa' value type 13 is unknown");
  ExpectPokedError<uint32_t>(After(small, "arr") + 4, 0xFFFFFFFF,
                             absl::StatusCode::kInvalidArgument,
                             "key 'arr' array element type 4294967295 is unknown");
  ExpectPokedError<uint8_t>(After(small, "flag") + 4, 2, absl::StatusCode::kInvalidArgument,
                            "key 'flag' bool value 2 is not 0 or 1");
}

TEST(GgufHostile, DuplicatesAndNesting) {
  Bytes b = SmallFile();
  Poke<uint8_t>(b, After(b, "ab") - 1, 'a');  // "ab" -> "aa".
  ExpectError(b, absl::StatusCode::kInvalidArgument, "duplicate key 'aa'");
  b = SmallFile();
  Poke<uint8_t>(b, After(b, "t2") - 1, '1');  // "t2" -> "t1".
  ExpectError(b, absl::StatusCode::kInvalidArgument, "duplicate tensor name 't1'");
  GgufWriter w;
  w.SetValue("deep", Nested(9));
  ExpectError(w.Serialize(), absl::StatusCode::kInvalidArgument,
              "key 'deep' has arrays nested more than 8 deep");
  GgufLimits shallow;
  shallow.max_nesting = 1;
  w.SetValue("deep", Nested(2));
  ExpectError(w.Serialize(), absl::StatusCode::kInvalidArgument, "nested more than 1 deep",
              shallow);
}

TEST(GgufHostile, BadAlignment) {
  GgufWriter w;
  w.SetU32("general.alignment", 48);
  ExpectError(w.Serialize(), absl::StatusCode::kInvalidArgument,
              "general.alignment 48 is not a power of two");
  w.SetU32("general.alignment", 0);
  ExpectError(w.Serialize(), absl::StatusCode::kInvalidArgument,
              "general.alignment 0 is not a power of two");
  w.SetU64("general.alignment", 32);
  ExpectError(w.Serialize(), absl::StatusCode::kInvalidArgument,
              "key 'general.alignment' is a uint64, expected a uint32");
}

TEST(GgufHostile, BadShapes) {
  const Bytes small = SmallFile();
  const size_t t0 = After(small, "t0");
  ExpectPokedError<uint32_t>(t0, 5, absl::StatusCode::kInvalidArgument,
                             "tensor 't0' has 5 dimensions (at most 4)");
  ExpectPokedError<int64_t>(NeAt(t0, 1), -4, absl::StatusCode::kInvalidArgument,
                            "tensor 't0' dimension 1 is negative (-4)");
  // 8 * 2^61 = 2^64 elements.
  ExpectPokedError<int64_t>(
      NeAt(t0, 1), int64_t{1} << 61, absl::StatusCode::kInvalidArgument,
      "tensor 't0' shape [8, 2305843009213693952] has more than 2^63 elements");
  // 2^62 elements of 4 bytes: 2^64 bytes.
  ExpectPokedError<int64_t>(NeAt(t0, 1), int64_t{1} << 59, absl::StatusCode::kInvalidArgument,
                            "tensor 't0' byte size overflows");
  ExpectPokedError<int64_t>(
      NeAt(After(small, "t1"), 0), 33, absl::StatusCode::kInvalidArgument,
      "tensor 't1' row length 33 is not a multiple of the q8_0 block size 32");
}

TEST(GgufHostile, UnknownTensorType) {
  const size_t type = TypeAt(After(SmallFile(), "t0"), 2);
  ExpectPokedError<uint32_t>(type, 99, absl::StatusCode::kUnimplemented,
                             "tensor 't0' has unsupported type id 99");
  // Q4_1: real, but not supported here.
  ExpectPokedError<uint32_t>(type, 3, absl::StatusCode::kUnimplemented,
                             "tensor 't0' has unsupported type id 3");
}

TEST(GgufHostile, BadOffsets) {
  const Bytes small = SmallFile();
  const size_t data_start = small.size() - 256;  // t0 128 + t1 68 (+28 padding) + t2 32.
  const size_t offset = OffsetAt(After(small, "t2"), 1);
  ExpectPokedError<uint64_t>(
      offset, 256, absl::StatusCode::kOutOfRange,
      absl::StrCat("tensor 't2' data [", data_start + 256, ", ", data_start + 288,
                   ") lies past the end of the file (", small.size(), " bytes)"));
  // The sum overflows u64.
  ExpectPokedError<uint64_t>(offset, ~uint64_t{31}, absl::StatusCode::kOutOfRange,
                             "lies past the end of the file");
  ExpectPokedError<uint64_t>(offset, 232, absl::StatusCode::kInvalidArgument,
                             "tensor 't2' offset 232 is not a multiple of the alignment 32");
}

TEST(GgufHostile, OverlappingTensors) {
  const Bytes small = SmallFile();
  // Inside t0's [0, 128).
  ExpectPokedError<uint64_t>(OffsetAt(After(small, "t1"), 2), 96,
                             absl::StatusCode::kInvalidArgument,
                             "tensors 't0' [0, 128) and 't1' [96, 164) overlap");
  // The same start as t0.
  ExpectPokedError<uint64_t>(OffsetAt(After(small, "t2"), 1), 0, absl::StatusCode::kInvalidArgument,
                             "overlap");
}

TEST(GgufHostile, RandomMutationsNeverCrash) {
  const Bytes valid = SmallFile();
  std::mt19937 rng(1234);
  int ok = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    Bytes b = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(b);
    if (!f.ok()) continue;
    ++ok;
    for (const GgufTensorInfo& t : (*f)->tensors()) {
      ASSERT_GE(t.data, b.data());
      ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
    }
  }
  EXPECT_GT(ok, 0);  // mutations inside tensor data keep the file valid.
}

}  // namespace
}  // namespace tg
