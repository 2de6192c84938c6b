// Tests of HashedRead (server/hashed_read.h): digests of byte ranges against sha256sum over the
// same range cut out by dd, the bytes delivered to dst, ranges that cross slice borders or end
// past the file (a shrunk file), and a read that fails.
#include "server/hashed_read.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/content_hash.h"

namespace tg::server {
namespace {

namespace fs = std::filesystem;

class HashedReadTest : public ::testing::Test {
 protected:
  // Two and a half slices, so ranges can start and end inside slices.
  static constexpr size_t kFileBytes = kHashedReadSliceBytes * 5 / 2 + 333;

  void SetUp() override {
    path_ = absl::StrCat(::testing::TempDir(), "/tg_hashed_read_", ::getpid(), ".bin");
    std::mt19937 rng(11);
    bytes_.resize(kFileBytes);
    for (uint8_t& b : bytes_) b = static_cast<uint8_t>(rng());
    std::ofstream out(path_, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes_.data()),
              static_cast<std::streamsize>(bytes_.size()));
    ASSERT_TRUE(out.good());
    out.close();
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
    fs::remove(path_);
  }

  // sha256sum of [offset, offset + size) of the file, cut out by dd: a reference that shares
  // no code with HashedRead.
  std::string Sha256sumOfRange(uint64_t offset, uint64_t size) const {
    const std::string cmd =
        absl::StrCat("dd if='", path_, "' iflag=skip_bytes,count_bytes skip=", offset,
                     " count=", size, " status=none | /usr/bin/sha256sum");
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return "popen failed";
    char line[256] = {};
    const bool got = std::fgets(line, sizeof(line), pipe) != nullptr;
    if (::pclose(pipe) != 0 || !got) return "sha256sum failed";
    return std::string(line, 64);
  }

  std::string path_;
  std::vector<uint8_t> bytes_;
  int fd_ = -1;
};

TEST_F(HashedReadTest, DigestsMatchSha256sumAcrossSliceBorders) {
  struct Range {
    uint64_t offset, size;
  };
  const Range ranges[] = {
      {0, kFileBytes},                         // the whole file
      {0, kHashedReadSliceBytes},              // exactly one slice
      {12345, 2 * kHashedReadSliceBytes + 7},  // starts and ends inside slices
      {kHashedReadSliceBytes - 1, 2},          // two bytes across a border
      {kFileBytes - 100, 100},                 // the file's tail
      {777, 0},                                // empty
  };
  std::string scratch;
  for (const Range& r : ranges) {
    SCOPED_TRACE(absl::StrCat("offset ", r.offset, " size ", r.size));
    absl::StatusOr<std::optional<rpc::Sha256Digest>> got =
        HashedRead(fd_, r.offset, r.size, nullptr, &scratch);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ(rpc::DigestHex(**got), Sha256sumOfRange(r.offset, r.size));
  }
  // The scratch holds one slice, not the range.
  EXPECT_EQ(scratch.size(), kHashedReadSliceBytes);
  // An empty range needs neither a destination nor a scratch (an empty cached blob).
  absl::StatusOr<std::optional<rpc::Sha256Digest>> empty = HashedRead(fd_, 0, 0, nullptr, nullptr);
  ASSERT_TRUE(empty.ok()) << empty.status();
  ASSERT_TRUE(empty->has_value());
  EXPECT_EQ(rpc::DigestHex(**empty), Sha256sumOfRange(0, 0));
}

TEST_F(HashedReadTest, DeliversTheBytesToDst) {
  const uint64_t offset = 4321;
  const uint64_t size = kFileBytes - offset - 10;
  std::vector<uint8_t> dst(size + 1, 0xAB);
  absl::StatusOr<std::optional<rpc::Sha256Digest>> got =
      HashedRead(fd_, offset, size, dst.data(), nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(rpc::DigestHex(**got), Sha256sumOfRange(offset, size));
  EXPECT_TRUE(std::equal(dst.begin(), dst.end() - 1, bytes_.begin() + offset));
  EXPECT_EQ(dst.back(), 0xAB) << "wrote past the range";
}

TEST_F(HashedReadTest, RangePastTheEndIsNulloptNotAnError) {
  std::string scratch;
  // A file that shrank: the range ends one byte past the end, or starts past it.
  for (uint64_t offset : {uint64_t{0}, uint64_t{kFileBytes - 5}, uint64_t{kFileBytes + 10}}) {
    const uint64_t size = offset < kFileBytes ? kFileBytes - offset + 1 : 8;
    SCOPED_TRACE(absl::StrCat("offset ", offset, " size ", size));
    absl::StatusOr<std::optional<rpc::Sha256Digest>> got =
        HashedRead(fd_, offset, size, nullptr, &scratch);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(got->has_value());
  }
  // Truncating the file under an open descriptor: the read that follows sees the new end.
  ASSERT_EQ(::truncate(path_.c_str(), kHashedReadSliceBytes), 0);
  std::vector<uint8_t> dst(kFileBytes);
  absl::StatusOr<std::optional<rpc::Sha256Digest>> got =
      HashedRead(fd_, 0, kFileBytes, dst.data(), nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());
}

TEST_F(HashedReadTest, FailedReadIsUnavailableWithTheReason) {
  const int dir_fd = ::open(::testing::TempDir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  std::string scratch;
  absl::StatusOr<std::optional<rpc::Sha256Digest>> got =
      HashedRead(dir_fd, 0, 16, nullptr, &scratch);
  ::close(dir_fd);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("Is a directory"), std::string::npos) << got.status();
}

}  // namespace
}  // namespace tg::server
