// tg-run on broken or unsupported GGUF files: a non-zero exit, one clear line on stderr naming
// the problem, and no crash (no signal). The files are made from a valid synthetic model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "models/synth/synth.h"

namespace tg {
namespace {

using ::testing::HasSubstr;

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal.
  std::string err;
};

// ctest runs each test of this file as its own process, in parallel: every file name carries
// the process id.
std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/tg_run_errors_" + std::to_string(getpid()) + "_" + name;
}

RunResult RunTgRun(const std::string& model) {
  const std::string err_path = TempPath("stderr.txt");
  const std::string cmd = std::string(TG_RUN_PATH) + " -m '" + model +
                          "' -n 2 --temp 0 >/dev/null 2>'" + err_path + "'";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(err_path.c_str());
  return r;
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// Byte position of a tensor's info record field after its name (n_dims, dims, type, offset).
size_t FieldAfterName(const std::vector<uint8_t>& bytes, const std::string& name, int field) {
  const std::string needle = name;
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  size_t pos = static_cast<size_t>(it - bytes.begin()) + needle.size();
  uint32_t n_dims;
  std::memcpy(&n_dims, &bytes[pos], 4);
  if (field == 0) return pos;  // n_dims
  pos += 4 + 8 * n_dims;
  if (field == 1) return pos;  // type (u32)
  return pos + 4;              // offset (u64)
}

class TgRunErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    valid_ = TempPath("valid.gguf");
    synth::SynthOptions o;
    o.out = valid_;
    o.dims = {64, 128, 2, 4, 2, 300};
    o.dims_text = "64,128,2,4,2,300";
    o.type = DType::kF32;
    o.type_name = "f32";
    ASSERT_TRUE(synth::RunSynth(o, stderr).ok());
  }
  static void TearDownTestSuite() { std::remove(valid_.c_str()); }
  static std::string Variant(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = TempPath(name + ".gguf");
    WriteAll(path, bytes);
    return path;
  }
  static void ExpectCleanFailure(const std::string& path, const std::string& expected) {
    RunResult r = RunTgRun(path);
    EXPECT_NE(r.exit_code, -1) << "tg-run crashed on " << path << ": " << r.err;
    EXPECT_NE(r.exit_code, 0) << path;
    std::string trimmed = r.err;
    while (!trimmed.empty() && (trimmed.front() == '\n')) trimmed.erase(trimmed.begin());
    while (!trimmed.empty() && (trimmed.back() == '\n')) trimmed.pop_back();
    EXPECT_EQ(std::count(trimmed.begin(), trimmed.end(), '\n'), 0) << "not one line: " << r.err;
    EXPECT_THAT(r.err, HasSubstr(expected));
    std::remove(path.c_str());
  }
  static std::string valid_;
};
std::string TgRunErrorsTest::valid_;

TEST_F(TgRunErrorsTest, ValidModelRuns) { EXPECT_EQ(RunTgRun(valid_).exit_code, 0); }

TEST_F(TgRunErrorsTest, BadMagic) {
  std::vector<uint8_t> b = ReadAll(valid_);
  b[0] = 'X';
  ExpectCleanFailure(Variant("magic", b), "magic");
}

TEST_F(TgRunErrorsTest, TruncatedTensorSection) {
  std::vector<uint8_t> b = ReadAll(valid_);
  b.resize(b.size() - 1000);
  ExpectCleanFailure(Variant("truncated", b), "past the end");
}

TEST_F(TgRunErrorsTest, OffsetPastTheEnd) {
  std::vector<uint8_t> b = ReadAll(valid_);
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(&b[FieldAfterName(b, "output.weight", 2)], &huge, 8);
  ExpectCleanFailure(Variant("offset", b), "output.weight");
}

TEST_F(TgRunErrorsTest, WrongTypeId) {
  std::vector<uint8_t> b = ReadAll(valid_);
  const uint32_t bad = 99;
  std::memcpy(&b[FieldAfterName(b, "blk.0.attn_q.weight", 1)], &bad, 4);
  ExpectCleanFailure(Variant("type", b), "type id 99");
}

TEST_F(TgRunErrorsTest, UnsupportedArchitecture) {
  auto file = GgufFile::Open(valid_);
  ASSERT_TRUE(file.ok()) << file.status();
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) {
    std::string k = key;
    if (k.rfind("llama.", 0) == 0) k = "mamba." + k.substr(6);
    w.SetValue(k, value);
  }
  w.SetString("general.architecture", "mamba");
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    ASSERT_TRUE(w.AddTensor(t.name, t.type, absl::MakeConstSpan(t.ne, t.n_dims),
                            absl::MakeConstSpan(t.data, t.nbytes))
                    .ok());
  }
  const std::string path = TempPath("arch.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  ExpectCleanFailure(path, "unsupported architecture 'mamba'");
}

TEST_F(TgRunErrorsTest, MissingFile) {
  ExpectCleanFailure(TempPath("no_such_model.gguf"), "no_such_model.gguf");
}

}  // namespace
}  // namespace tg
