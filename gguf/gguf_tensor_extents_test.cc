// ReadGgufTensorExtents (pread, rpc-server's --model-dir) and TensorExtentsOf: the extents must
// hold exactly the bytes each tensor was written with, agree with the mapped parse on a model
// llama.cpp's tools wrote, fail cleanly on every cut and on a file that shrank, and leave a
// tensor of an unknown type out (counted) while the model loader refuses the file.
#include "gguf/gguf_tensor_extents.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/gguf_extents_test_", ::getpid(), "_", name);
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

absl::StatusOr<GgufTensorExtents> ReadPath(const std::string& path, uint64_t size_override = 0) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  const uint64_t size = size_override != 0 ? size_override : FileBytes(path).size();
  absl::StatusOr<GgufTensorExtents> t = ReadGgufTensorExtents(fd, size, path);
  close(fd);
  return t;
}

// Tensor i of the written files: n_i f32 elements, every byte i + 1.
struct Written {
  std::string name;
  int64_t floats;
};
const std::vector<Written> kTensors = {{"a", 8}, {"b", 100}, {"c", 1}, {"d", 4096}, {"e", 3}};

std::string WriteModel(const std::string& name, size_t alignment) {
  GgufWriter w(alignment);
  w.SetString("general.architecture", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", std::vector<std::string>(1000, "token"));
  for (size_t i = 0; i < kTensors.size(); ++i) {
    const int64_t ne[] = {kTensors[i].floats};
    EXPECT_TRUE(w.AddTensor(kTensors[i].name, DType::kF32, ne,
                            std::vector<uint8_t>(4 * kTensors[i].floats, i + 1))
                    .ok());
  }
  const std::string path = TempPath(name);
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

TEST(GgufTensorExtentsTest, ExtentsHoldTheBytesWritten) {
  for (size_t alignment : {32, 256}) {
    const std::string path = WriteModel(absl::StrCat("a", alignment, ".gguf"), alignment);
    const std::string bytes = FileBytes(path);
    absl::StatusOr<GgufTensorExtents> got = ReadPath(path);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->unknown_type_tensors, 0u);
    ASSERT_EQ(got->tensors.size(), kTensors.size());
    // The writer puts the first tensor at the start of the data section.
    EXPECT_EQ(got->data_start, got->tensors[0].offset);
    EXPECT_EQ(got->data_start % alignment, 0u);
    for (size_t i = 0; i < kTensors.size(); ++i) {
      const GgufExtent& e = got->tensors[i];
      EXPECT_EQ(e.size, 4 * static_cast<uint64_t>(kTensors[i].floats)) << kTensors[i].name;
      EXPECT_EQ(e.offset % alignment, 0u) << kTensors[i].name;
      ASSERT_LE(e.offset + e.size, bytes.size()) << kTensors[i].name;
      EXPECT_EQ(bytes.substr(e.offset, e.size), std::string(e.size, static_cast<char>(i + 1)))
          << kTensors[i].name;
    }
    std::remove(path.c_str());
  }
}

TEST(GgufTensorExtentsTest, PreadAgreesWithTheMappedFileOnARealModel) {
#ifndef TG_DEMO_MODEL
  GTEST_SKIP() << "TG_DEMO_MODEL not set";
#else
  absl::StatusOr<std::unique_ptr<GgufFile>> mapped = GgufFile::Open(TG_DEMO_MODEL);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const GgufTensorExtents want = TensorExtentsOf(**mapped);
  ASSERT_FALSE(want.tensors.empty());
  // The mapped view by hand: data pointers minus the mapping's start.
  EXPECT_EQ(want.data_start,
            static_cast<uint64_t>((*mapped)->data_section() - (*mapped)->bytes().data()));
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    const GgufTensorInfo& t = (*mapped)->tensors()[i];
    EXPECT_EQ(want.tensors[i].offset, static_cast<uint64_t>(t.data - (*mapped)->bytes().data()));
    EXPECT_EQ(want.tensors[i].size, t.nbytes);
  }
  absl::StatusOr<GgufTensorExtents> got = ReadPath(TG_DEMO_MODEL);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->data_start, want.data_start);
  EXPECT_EQ(got->tensors, want.tensors);
  EXPECT_EQ(got->unknown_type_tensors, 0u);
#endif
}

TEST(GgufTensorExtentsTest, EveryCutIsAnErrorNamingTheFile) {
  const std::string path = WriteModel("cut_src.gguf", 32);
  const std::string bytes = FileBytes(path);
  const std::string cut = TempPath("cut.gguf");
  absl::StatusOr<GgufTensorExtents> whole = ReadPath(path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const uint64_t data_end = whole->tensors.back().offset + whole->tensors.back().size;
  for (size_t n = 0; n < data_end; n += (n < whole->data_start ? 7 : 37)) {
    WriteBytes(cut, bytes.substr(0, n));
    absl::StatusOr<GgufTensorExtents> t = ReadPath(cut);
    ASSERT_FALSE(t.ok()) << n;
    EXPECT_TRUE(absl::IsInvalidArgument(t.status()) || absl::IsOutOfRange(t.status()))
        << n << ": " << t.status();
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(cut)) << n;
  }
  // A file shorter than the size the caller believes (it shrank after the stat).
  WriteBytes(cut, bytes.substr(0, whole->data_start / 2));
  absl::StatusOr<GgufTensorExtents> t = ReadPath(cut, bytes.size());
  EXPECT_TRUE(absl::IsOutOfRange(t.status())) << t.status();
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("shrank"));
  std::string bad = bytes;
  bad[0] = 'X';
  WriteBytes(cut, bad);
  EXPECT_THAT(std::string(ReadPath(cut).status().message()), HasSubstr("bad magic"));
  std::remove(cut.c_str());
  std::remove(path.c_str());
}

TEST(GgufTensorExtentsTest, AnUnknownTensorTypeIsLeftOutAndCounted) {
  const std::string path = WriteModel("type_src.gguf", 32);
  std::string bytes = FileBytes(path);
  absl::StatusOr<GgufTensorExtents> want = ReadPath(path);
  ASSERT_TRUE(want.ok()) << want.status();
  // Tensor "b": name (u64 length 1, "b"), n_dims u32 = 1, ne u64, then the type u32.
  const std::string name("\x01\0\0\0\0\0\0\0b", 9);
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 8;
  ASSERT_EQ(bytes[type_at], 0);  // f32.
  bytes[type_at] = 100;          // no such type.
  const std::string changed = TempPath("type.gguf");
  WriteBytes(changed, bytes);
  absl::StatusOr<GgufTensorExtents> got = ReadPath(changed);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->unknown_type_tensors, 1u);
  EXPECT_EQ(got->data_start, want->data_start);
  std::vector<GgufExtent> expected = want->tensors;
  expected.erase(expected.begin() + 1);
  EXPECT_EQ(got->tensors, expected);
  // The model loader refuses what it cannot compute with.
  absl::StatusOr<std::unique_ptr<GgufFile>> loaded = GgufFile::Open(changed);
  EXPECT_TRUE(absl::IsUnimplemented(loaded.status())) << loaded.status();
  std::remove(changed.c_str());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tg
