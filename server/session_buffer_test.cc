// Fresh memory is never read back as it was found: bytes no write reached read as zero
// (after a previous owner's data was planted in the memory), written, memset and uploaded
// ranges keep their contents, zeroing happens once, a failed fill is zeroed, and reads racing
// writes see neither the old bytes nor zero a write that landed.
#include "server/session_buffer.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "backends/register_builtin.h"
#include "core/registry.h"
#include "core/strided_range.h"
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

TEST(SessionBufferTest, AFilledRangeKeepsWhatTheUploadPutThere) {
  std::unique_ptr<SessionBuffer> b = UsedMemory();
  {
    SessionBuffer::Fill fill = b->BeginFill(10, 20);
    std::memset(b->HostPointer(10), 'u', 20);  // the upload writes through the host pointer.
    fill.Done();
  }
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
    SessionBuffer::Fill fill = b->BeginFill(off, 5);
    std::memset(b->HostPointer(off), 'c', 5);
    fill.Done();
  }
  std::string want(kSize, '\0');
  for (uint64_t off : {40, 45, 50, 299, 300, 900}) want.replace(off, 5, "ccccc");
  EXPECT_EQ(Read(*b, 0, kSize), want);
}

// 2D rows: rows written apart keep their bytes and the gaps between them read as zero; rows
// read from memory nothing wrote are zeros, not what the memory held.
TEST(SessionBufferTest, RowsWrittenApartKeepTheirBytesAndTheGapsReadAsZero) {
  std::unique_ptr<SessionBuffer> b = UsedMemory();
  StridedRange r;
  r.offset = 10;
  r.row_size = 4;
  r.n_rows = 3;
  r.stride = 10;
  ASSERT_TRUE(b->WriteRows(r, "aaaabbbbcccc").ok());
  std::string want(kSize, '\0');
  want.replace(10, 4, "aaaa");
  want.replace(20, 4, "bbbb");
  want.replace(30, 4, "cccc");
  EXPECT_EQ(Read(*b, 0, kSize), want);
  // Back to back: one written range.
  std::unique_ptr<SessionBuffer> c = UsedMemory();
  r.stride = 4;
  ASSERT_TRUE(c->WriteRows(r, "aaaabbbbcccc").ok());
  want.assign(kSize, '\0');
  want.replace(10, 12, "aaaabbbbcccc");
  EXPECT_EQ(Read(*c, 0, kSize), want);
  // Read as rows from memory nothing wrote.
  std::unique_ptr<SessionBuffer> d = UsedMemory();
  r.stride = 100;
  std::string rows(12, '?');
  ASSERT_TRUE(d->ReadRows(r, rows.data()).ok());
  EXPECT_EQ(rows, std::string(12, '\0'));
}

// A fill that fails (a cache or model-file read that missed) gives its range back: what it left
// there is zeroed before a read, while the bytes around it keep theirs.
TEST(SessionBufferTest, AnUnfinishedFillIsZeroedBeforeARead) {
  std::unique_ptr<SessionBuffer> b = UsedMemory();
  ASSERT_TRUE(b->Write(0, "head", 4).ok());
  {
    SessionBuffer::Fill fill = b->BeginFill(2, 100);  // overlaps the written "ad".
    std::memset(b->HostPointer(4), 'x', 98);          // another file's bytes; no Done().
  }
  std::string want(kSize, '\0');
  want.replace(0, 4, "head");
  EXPECT_EQ(Read(*b, 0, kSize), want);
}

// A read that starts while a fill is copying waits for it instead of zeroing under it or
// reading what the memory held before.
TEST(SessionBufferTest, AReadWaitsForAFillInFlight) {
  std::unique_ptr<SessionBuffer> b = UsedMemory();
  std::optional<SessionBuffer::Fill> fill(b->BeginFill(0, kSize));
  std::memset(b->HostPointer(0), 'f', kSize / 2);
  std::atomic<bool> read_done{false};
  std::string seen;
  std::thread reader([&] {
    seen = Read(*b, 0, kSize);
    read_done = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(read_done.load());
  std::memset(b->HostPointer(kSize / 2), 'f', kSize - kSize / 2);
  fill->Done();
  fill.reset();
  reader.join();
  EXPECT_EQ(seen, std::string(kSize, 'f'));
}

// Writes and reads of fresh memory at once, as a model upload and a client's Read or graph
// may be: every read sees zeros or the written bytes, never the previous owner's, and no
// written chunk is zeroed after it landed (the clear racing a write).
TEST(SessionBufferTest, ConcurrentWritesAndReadsNeverSeeOldBytesNorLoseWrites) {
  constexpr uint64_t kBig = 1 << 20, kChunk = 4096;
  constexpr int kRounds = 20;
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  for (int round = 0; round < kRounds; ++round) {
    absl::StatusOr<std::unique_ptr<Buffer>> mem =
        Registry::Get().CpuDevice()->default_buffer_type()->Allocate(kBig);
    ASSERT_TRUE(mem.ok()) << mem.status();
    std::memset((*mem)->base(), kOld, kBig);
    SessionBuffer b(*std::move(mem), 0, kBig, nullptr);
    const std::string chunk(kChunk, 'w');
    std::atomic<bool> writing{true};
    std::thread writer([&] {
      for (uint64_t off = 0; off < kBig; off += kChunk) {
        EXPECT_TRUE(b.Write(off, chunk.data(), kChunk).ok());
      }
      writing = false;
    });
    std::string seen(kBig, '?');
    int bad = 0;
    do {
      const uint64_t at = (round * 7919 * kChunk) % kBig;  // read the written and the unwritten.
      ASSERT_TRUE(b.Read(at, seen.data(), kBig - at).ok());
      for (uint64_t i = 0; i < kBig - at; ++i) bad += seen[i] != '\0' && seen[i] != 'w';
    } while (writing.load());
    writer.join();
    EXPECT_EQ(bad, 0) << "round " << round << ": a read saw a previous owner's bytes";
    ASSERT_TRUE(b.Read(0, seen.data(), kBig).ok());
    EXPECT_EQ(seen.find_first_not_of('w'), std::string::npos)
        << "round " << round << ": a written chunk was zeroed at " << seen.find_first_not_of('w');
  }
}

}  // namespace
}  // namespace tg::server
