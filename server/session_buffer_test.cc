// Fresh memory is never read back as it was found: bytes no write reached read as zero
// (after a previous owner's data was planted in the memory), written, memset and uploaded
// ranges keep their contents, and zeroing happens once.
#include "server/session_buffer.h"

#include <cstring>
#include <memory>
#include <string>

#include "backends/register_builtin.h"
#include "core/registry.h"
#include "gtest/gtest.h"

namespace tg::server {
namespace {

constexpr uint64_t kSize = 1000;
constexpr uint8_t kOld = 0xab;  // what a previous owner left in the memory.

std::unique_ptr<SessionBuffer> UsedMemory() {
  EXPECT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<std::unique_ptr<Buffer>> b =
      Registry::Get().CpuDevice()->default_buffer_type()->Allocate(kSize);
  EXPECT_TRUE(b.ok()) << b.status();
  std::memset((*b)->base(), kOld, kSize);
  return std::make_unique<SessionBuffer>(*std::move(b), 0, kSize, nullptr);
}

std::string Read(const SessionBuffer& b, uint64_t offset, uint64_t size) {
  std::string out(size, '?');
  EXPECT_TRUE(b.Read(offset, out.data(), size).ok());
  return out;
}

TEST(SessionBufferTest, UnwrittenBytesReadAsZero) {
  std::unique_ptr<SessionBuffer> b = UsedMemory();
  ASSERT_TRUE(b->Write(100, "hello", 5).ok());
  ASSERT_TRUE(b->Memset(200, 7, 10).ok());
  std::string want(kSize, '\0');
  want.replace(100, 5, "hello");
  want.replace(200, 10, std::string(10, 7));
  EXPECT_EQ(Read(*b, 0, kSize), want);
}

TEST(SessionBufferTest, AClaimedRangeKeepsWhatTheUploadPutThere) {
  std::unique_ptr<SessionBuffer> b = UsedMemory();
  b->ClaimForUpload(10, 20);
  std::memset(b->HostPointer(10), 'u', 20);  // the upload writes through the host pointer.
  ASSERT_TRUE(b->ClearUnwritten().ok());
  std::string want(kSize, '\0');
  want.replace(10, 20, std::string(20, 'u'));
  EXPECT_EQ(Read(*b, 0, kSize), want);
  // Cleared once: later writes through the host pointer are not zeroed again.
  std::memset(b->HostPointer(500), 'v', 3);
  EXPECT_EQ(Read(*b, 500, 3), "vvv");
}

TEST(SessionBufferTest, CopiesFromUnwrittenMemoryCopyZeros) {
  std::unique_ptr<SessionBuffer> src = UsedMemory();
  std::unique_ptr<SessionBuffer> dst = UsedMemory();
  ASSERT_TRUE(SessionBuffer::Copy(*src, 0, *dst, 0, 100).ok());
  EXPECT_EQ(Read(*dst, 0, 100), std::string(100, '\0'));
  EXPECT_EQ(Read(*dst, 100, 10), std::string(10, '\0'));  // the rest: unwritten, zeroed.
}

TEST(SessionBufferTest, OverlappingWritesSplitTheUnwrittenRanges) {
  std::unique_ptr<SessionBuffer> b = UsedMemory();
  for (uint64_t off : {50, 40, 45, 300, 299, 900}) {
    b->ClaimForUpload(off, 5);
    std::memset(b->HostPointer(off), 'c', 5);
  }
  std::string want(kSize, '\0');
  for (uint64_t off : {40, 45, 50, 299, 300, 900}) want.replace(off, 5, "ccccc");
  EXPECT_EQ(Read(*b, 0, kSize), want);
}

}  // namespace
}  // namespace tg::server
