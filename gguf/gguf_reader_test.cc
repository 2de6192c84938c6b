// GgufPreadReader against the bytes it reads: any range, in any order, through windows smaller
// and larger than the range; a file shorter than claimed and an unreadable descriptor fail
// with a status naming the file.
#include "gguf/gguf_reader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

using ::testing::HasSubstr;

class GgufPreadReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(7);
    bytes_.resize(10000);
    for (uint8_t& b : bytes_) b = static_cast<uint8_t>(rng());
    fd_ = memfd_create("gguf_reader_test", MFD_CLOEXEC);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(write(fd_, bytes_.data(), bytes_.size()), static_cast<ssize_t>(bytes_.size()));
  }
  void TearDown() override { close(fd_); }

  std::vector<uint8_t> bytes_;
  int fd_ = -1;
};

TEST_F(GgufPreadReaderTest, EveryRangeReadsTheFileBytes) {
  std::mt19937 rng(11);
  for (size_t window : {size_t{1}, size_t{13}, size_t{4096}, size_t{1} << 20}) {
    GgufPreadReader reader(fd_, bytes_.size(), "m.gguf", window);
    EXPECT_EQ(reader.size(), bytes_.size());
    EXPECT_TRUE(reader.in_memory().empty());
    for (int i = 0; i < 2000; ++i) {
      // Mostly forward (as the parser reads), sometimes back, sometimes long.
      const uint64_t offset = rng() % bytes_.size();
      const size_t n = std::min<size_t>(rng() % (i % 10 == 0 ? 3000 : 20), bytes_.size() - offset);
      if (n == 0) continue;
      absl::StatusOr<const uint8_t*> p = reader.Bytes(offset, n);
      ASSERT_TRUE(p.ok()) << p.status();
      ASSERT_EQ(std::memcmp(*p, bytes_.data() + offset, n), 0)
          << "window " << window << " offset " << offset << " n " << n;
    }
  }
}

TEST_F(GgufPreadReaderTest, AFileShorterThanClaimedFailsNamingIt) {
  GgufPreadReader reader(fd_, bytes_.size() + 100, "m.gguf", 64);
  EXPECT_TRUE(reader.Bytes(0, 8).ok());
  absl::StatusOr<const uint8_t*> p = reader.Bytes(bytes_.size() - 4, 50);
  EXPECT_TRUE(absl::IsOutOfRange(p.status())) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("m.gguf: cannot read bytes"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("shrank"));
}

TEST_F(GgufPreadReaderTest, AnUnreadableDescriptorIsUnavailable) {
  GgufPreadReader reader(-1, 100, "m.gguf");
  absl::StatusOr<const uint8_t*> p = reader.Bytes(0, 4);
  EXPECT_TRUE(absl::IsUnavailable(p.status())) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("m.gguf"));
}

TEST(GgufBytesReaderTest, PointsIntoTheBytes) {
  const std::vector<uint8_t> bytes = {1, 2, 3, 4, 5};
  GgufBytesReader reader(bytes);
  EXPECT_EQ(reader.size(), 5u);
  EXPECT_EQ(reader.in_memory().data(), bytes.data());
  absl::StatusOr<const uint8_t*> p = reader.Bytes(2, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, bytes.data() + 2);
}

}  // namespace
}  // namespace tg
