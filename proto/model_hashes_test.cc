// The .tghash format: a round trip, every truncation and every flipped byte detected, a
// sidecar for another file, a modified file or other pieces refused by CheckModelHashes, and
// the file functions (missing file, atomic write).
#include "proto/model_hashes.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

ModelHashes Sample() {
  ModelHashes h;
  h.identity.size = 1 << 20;
  h.identity.header = Sha256("header", 6);
  h.mtime_ns = 1700000000123456789;
  for (uint64_t i = 0; i < 3; ++i) {
    const std::string s = std::to_string(i);
    h.pieces.push_back({{4096 + i * 100, 100}, Sha256(s.data(), s.size())});
  }
  return h;
}

std::vector<FileRange> RangesOf(const ModelHashes& h) {
  std::vector<FileRange> out;
  for (const PieceHash& p : h.pieces) out.push_back(p.range);
  return out;
}

TEST(ModelHashesTest, RoundTrip) {
  const ModelHashes h = Sample();
  absl::StatusOr<ModelHashes> back = ParseModelHashes(SerializeModelHashes(h));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->identity, h.identity);
  EXPECT_EQ(back->mtime_ns, h.mtime_ns);
  ASSERT_EQ(back->pieces.size(), h.pieces.size());
  for (size_t i = 0; i < h.pieces.size(); ++i) {
    EXPECT_EQ(back->pieces[i].range, h.pieces[i].range);
    EXPECT_EQ(back->pieces[i].digest, h.pieces[i].digest);
  }
  EXPECT_TRUE(CheckModelHashes(*back, h.identity, h.mtime_ns, RangesOf(h)).ok());
}

TEST(ModelHashesTest, EveryTruncationIsDataLoss) {
  const std::string bytes = SerializeModelHashes(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<ModelHashes> h = ParseModelHashes(bytes.substr(0, n));
    EXPECT_TRUE(absl::IsDataLoss(h.status())) << n << ": " << h.status();
  }
  absl::StatusOr<ModelHashes> longer = ParseModelHashes(bytes + "x");
  EXPECT_TRUE(absl::IsDataLoss(longer.status())) << longer.status();
}

TEST(ModelHashesTest, EveryFlippedByteIsDataLoss) {
  const std::string bytes = SerializeModelHashes(Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_TRUE(absl::IsDataLoss(ParseModelHashes(bad).status())) << "byte " << i;
  }
}

TEST(ModelHashesTest, AHugePieceCountIsRefusedBeforeAllocating) {
  std::string bytes = SerializeModelHashes(Sample());
  const size_t count_at = 8 + 8 + kSha256Bytes + 8 + 8;
  for (int i = 0; i < 8; ++i) bytes[count_at + i] = static_cast<char>(0xff);
  absl::StatusOr<ModelHashes> h = ParseModelHashes(bytes);
  EXPECT_TRUE(absl::IsDataLoss(h.status())) << h.status();
  EXPECT_NE(h.status().message().find("truncated or corrupt"), std::string::npos) << h.status();
}

TEST(ModelHashesTest, CheckRefusesAnotherFileAModifiedFileAndOtherPieces) {
  const ModelHashes h = Sample();
  ModelIdentity other = h.identity;
  other.size += 1;
  absl::Status s = CheckModelHashes(h, other, h.mtime_ns, RangesOf(h));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("another file"), std::string::npos) << s;
  other = h.identity;
  other.header[0] ^= 1;
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckModelHashes(h, other, h.mtime_ns, RangesOf(h))));
  s = CheckModelHashes(h, h.identity, h.mtime_ns + 1, RangesOf(h));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("modified"), std::string::npos) << s;
  std::vector<FileRange> fewer = RangesOf(h);
  fewer.pop_back();
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckModelHashes(h, h.identity, h.mtime_ns, fewer)));
  std::vector<FileRange> moved = RangesOf(h);
  moved[1].offset += 32;
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckModelHashes(h, h.identity, h.mtime_ns, moved)));
}

TEST(ModelHashesTest, FilesAreWrittenWholeAndReadBack) {
  // Per process and emptied first: a file left by an earlier run would read back.
  const std::string dir = ::testing::TempDir() + "/model_hashes_test_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/m.gguf.tghash";
  EXPECT_TRUE(absl::IsNotFound(ReadModelHashes(path).status()));
  ASSERT_TRUE(WriteModelHashes(path, Sample()).ok());
  absl::StatusOr<ModelHashes> back = ReadModelHashes(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pieces.size(), 3u);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename(), "m.gguf.tghash");  // no temp file left behind.
  }
  // A truncated file names itself.
  std::filesystem::resize_file(path, 50);
  absl::StatusOr<ModelHashes> cut = ReadModelHashes(path);
  EXPECT_TRUE(absl::IsDataLoss(cut.status())) << cut.status();
  EXPECT_NE(cut.status().message().find(path), std::string::npos) << cut.status();
  EXPECT_EQ(SidecarPath("/a/b.gguf"), "/a/b.gguf.tghash");
}

}  // namespace
}  // namespace tg::rpc
