// Helpers for the tests of the --model-dir index: a small GGUF model file with f32 tensors of
// chosen sizes (one can be larger than a piece), written with models/ GgufWriter, and its
// bytes and tensor extents as models/ GgufFile (an independent parser) reads them.
#ifndef TENSORGRID_SERVER_MODEL_TESTING_H_
#define TENSORGRID_SERVER_MODEL_TESTING_H_

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gtest/gtest.h"
#include "proto/model_identity.h"

namespace tg::server::testing {

// Writes a GGUF file at `path` with one f32 tensor per entry of `floats` (that many values,
// random from `seed`) and some metadata; returns false on failure.
inline bool WriteTestModel(const std::string& path, const std::vector<int64_t>& floats,
                           uint32_t seed) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("general.name", absl::StrCat("test model ", seed));
  w.SetStringArray("tokenizer.ggml.tokens", std::vector<std::string>(50, "tok"));
  std::mt19937 rng(seed);
  for (size_t i = 0; i < floats.size(); ++i) {
    std::vector<uint8_t> data(floats[i] * sizeof(float));
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    const int64_t ne[] = {floats[i]};
    if (!w.AddTensor(absl::StrCat("t", i), DType::kF32, ne, std::move(data)).ok()) return false;
  }
  return w.WriteFile(path).ok();
}

inline std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The model's identity and tensor extents, by models/ GgufFile.
struct TestModelFacts {
  rpc::ModelIdentity identity;
  uint64_t data_start = 0;
  std::vector<rpc::FileRange> tensors;
};

inline TestModelFacts FactsOf(const std::string& path) {
  TestModelFacts f;
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return f;
  f.data_start = static_cast<uint64_t>((*file)->data_section() - (*file)->bytes().data());
  f.identity = rpc::IdentityOf((*file)->bytes().subspan(0, f.data_start), (*file)->file_size());
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    f.tensors.push_back({f.data_start + t.offset, t.nbytes});
  }
  return f;
}

// Sets a file's mtime (nanoseconds), e.g. back to what it was after changing a byte.
inline void SetMtimeNs(const std::string& path, int64_t ns) {
  const struct timespec times[2] = {{ns / 1000000000, ns % 1000000000},
                                    {ns / 1000000000, ns % 1000000000}};
  utimensat(AT_FDCWD, path.c_str(), times, 0);
}

inline int64_t MtimeNs(const std::string& path) {
  struct stat st;
  stat(path.c_str(), &st);
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// A fresh directory under the test's temp dir, per process: ctest runs each test of a
// fixture in its own process, in parallel, and they must not empty each other's directory.
inline std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace tg::server::testing

#endif  // TENSORGRID_SERVER_MODEL_TESTING_H_
