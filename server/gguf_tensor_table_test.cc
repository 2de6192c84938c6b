// ReadGgufTensorTable against models/ GgufFile (an independent parser) on written and real
// models, and on damaged files: every cut is an error (never a crash), unknown tensor types
// are left out and counted.
#include "server/gguf_tensor_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/shared_model_path.h"
#include "server/model_test_util.h"

namespace tg::server {
namespace {

using testing::FactsOf;
using testing::FileBytes;
using testing::WriteTestModel;

absl::StatusOr<GgufTensorTable> ReadPath(const std::string& path, uint64_t size_override = 0) {
  const int fd = open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  const uint64_t size = size_override != 0 ? size_override : FileBytes(path).size();
  absl::StatusOr<GgufTensorTable> t = ReadGgufTensorTable(fd, size);
  close(fd);
  return t;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

void ExpectSameAsGgufFile(const std::string& path) {
  const testing::TestModelFacts want = FactsOf(path);
  absl::StatusOr<GgufTensorTable> got = ReadPath(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->data_start, want.data_start);
  EXPECT_EQ(got->tensors, want.tensors);
  EXPECT_EQ(got->unknown_type_tensors, 0u);
}

TEST(GgufTensorTableTest, SameExtentsAsTheModelLoader) {
  const std::string dir = testing::FreshDir("gguf_tensor_table");
  ASSERT_TRUE(WriteTestModel(dir + "/a.gguf", {8, 100, 1, 4096}, 1));
  ExpectSameAsGgufFile(dir + "/a.gguf");
  GgufWriter w(256);  // a non-default alignment, recorded in the metadata.
  const int64_t ne[] = {3};
  ASSERT_TRUE(w.AddTensor("x", DType::kF32, ne, std::vector<uint8_t>(12, 1)).ok());
  ASSERT_TRUE(w.AddTensor("y", DType::kF32, ne, std::vector<uint8_t>(12, 2)).ok());
  ASSERT_TRUE(w.WriteFile(dir + "/b.gguf").ok());
  ExpectSameAsGgufFile(dir + "/b.gguf");
  ExpectSameAsGgufFile(DemoModelPath());  // written by llama.cpp's tools.
}

TEST(GgufTensorTableTest, EveryCutIsAnErrorNamingTheProblem) {
  const std::string dir = testing::FreshDir("gguf_tensor_table_cut");
  ASSERT_TRUE(WriteTestModel(dir + "/a.gguf", {8, 100}, 2));
  const std::string bytes = FileBytes(dir + "/a.gguf");
  const testing::TestModelFacts facts = FactsOf(dir + "/a.gguf");
  const uint64_t data_end = facts.tensors.back().offset + facts.tensors.back().size;
  for (size_t n = 0; n < data_end; n += (n < facts.data_start ? 1 : 37)) {
    WriteBytes(dir + "/cut.gguf", bytes.substr(0, n));
    absl::StatusOr<GgufTensorTable> t = ReadPath(dir + "/cut.gguf");
    EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << n << ": " << t.status();
  }
  // A file that is shorter than the size the caller believes (it shrank): an error too.
  absl::StatusOr<GgufTensorTable> t = ReadPath(dir + "/cut.gguf", bytes.size() + 1000);
  EXPECT_FALSE(t.ok());
  std::string bad = bytes;
  bad[0] = 'X';
  WriteBytes(dir + "/bad.gguf", bad);
  EXPECT_NE(ReadPath(dir + "/bad.gguf").status().message().find("bad magic"), std::string::npos);
}

TEST(GgufTensorTableTest, AnUnknownTensorTypeIsLeftOutAndCounted) {
  const std::string dir = testing::FreshDir("gguf_tensor_table_type");
  ASSERT_TRUE(WriteTestModel(dir + "/a.gguf", {8, 100, 16}, 3));
  std::string bytes = FileBytes(dir + "/a.gguf");
  // Tensor "t1": name (u64 length 2, "t1"), n_dims u32 = 1, ne u64, then the type u32.
  const std::string name("\x02\0\0\0\0\0\0\0t1", 10);
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 8;
  ASSERT_EQ(bytes[type_at], 0);  // f32.
  bytes[type_at] = 100;          // no such type.
  WriteBytes(dir + "/b.gguf", bytes);
  absl::StatusOr<GgufTensorTable> t = ReadPath(dir + "/b.gguf");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->unknown_type_tensors, 1u);
  const testing::TestModelFacts want = FactsOf(dir + "/a.gguf");
  EXPECT_EQ(t->tensors, (std::vector<rpc::FileRange>{want.tensors[0], want.tensors[2]}));
}

}  // namespace
}  // namespace tg::server
