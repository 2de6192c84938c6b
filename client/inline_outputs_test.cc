// InlineOutputs: ranges read back from the outputs that hold, and outputs that a later
// write made stale, whether they were filed before or after the write went out.
#include "client/inline_outputs.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

std::string Read(const InlineOutputs& outputs, uint64_t buffer, uint64_t offset, size_t size) {
  std::string out(size, '?');
  return outputs.Read(buffer, offset, out.data(), size) ? out : "<none>";
}

TEST(RangeInsideTest, HoldsOnlyForRangesInside) {
  EXPECT_TRUE(RangeInside(10, 5, 10, 5));
  EXPECT_TRUE(RangeInside(12, 0, 10, 5));
  EXPECT_TRUE(RangeInside(11, 3, 10, 5));
  EXPECT_FALSE(RangeInside(9, 2, 10, 5));
  EXPECT_FALSE(RangeInside(14, 2, 10, 5));
  EXPECT_FALSE(RangeInside(10, 6, 10, 5));
  EXPECT_FALSE(RangeInside(UINT64_MAX, 2, 10, UINT64_MAX - 10));  // offset + size overflows.
  EXPECT_TRUE(RangeInside(UINT64_MAX - 1, 1, 0, UINT64_MAX));
}

TEST(InlineOutputsTest, ReadsRangesInsideAnOutputOfTheSameBuffer) {
  InlineOutputs outputs;
  outputs.Add(5, 1, 100, "abcdef");
  outputs.Add(5, 2, 100, "ghijkl");
  EXPECT_EQ(Read(outputs, 1, 100, 6), "abcdef");
  EXPECT_EQ(Read(outputs, 1, 102, 3), "cde");
  EXPECT_EQ(Read(outputs, 2, 105, 1), "l");
  EXPECT_EQ(Read(outputs, 1, 99, 2), "<none>");   // starts before.
  EXPECT_EQ(Read(outputs, 1, 104, 3), "<none>");  // ends after.
  EXPECT_EQ(Read(outputs, 3, 100, 1), "<none>");  // another buffer.
}

TEST(InlineOutputsTest, TheNewestOutputOfARangeWins) {
  InlineOutputs outputs;
  outputs.Add(5, 1, 0, "old");
  outputs.Add(6, 1, 0, "new");
  EXPECT_EQ(Read(outputs, 1, 0, 3), "new");
}

TEST(InlineOutputsTest, AWriteMakesTheOutputsOfEarlierCommandsStale) {
  InlineOutputs outputs;
  outputs.Add(5, 1, 0, "five");
  outputs.Add(7, 2, 0, "seven");
  outputs.StaleBefore(6);
  EXPECT_EQ(Read(outputs, 1, 0, 4), "<none>");
  EXPECT_EQ(Read(outputs, 2, 0, 5), "seven");  // came after the write.
  // A reply of an earlier command read after the write went out is stale on arrival.
  outputs.Add(4, 3, 0, "four");
  EXPECT_EQ(Read(outputs, 3, 0, 4), "<none>");
  outputs.Add(6, 3, 0, "six");  // the write itself (a Compute) returned it: it holds.
  EXPECT_EQ(Read(outputs, 3, 0, 3), "six");
  outputs.StaleBefore(2);  // an older write, noted late, keeps later outputs.
  EXPECT_EQ(Read(outputs, 2, 0, 5), "seven");
  outputs.StaleBefore(8);
  EXPECT_EQ(Read(outputs, 2, 0, 5), "<none>");
  EXPECT_EQ(Read(outputs, 3, 0, 3), "<none>");
}

TEST(InlineOutputsTest, AForgottenBufferLosesOnlyItsOwnOutputs) {
  InlineOutputs outputs;
  outputs.Add(5, 1, 0, "one");
  outputs.Add(5, 2, 0, "two");
  outputs.ForgetBuffer(1);
  EXPECT_EQ(Read(outputs, 1, 0, 3), "<none>");
  EXPECT_EQ(Read(outputs, 2, 0, 3), "two");
}

TEST(InlineOutputsTest, OnlyCommandsThatChangeNoBytesMayNotWrite) {
  auto may_write = [](auto set) {
    pb::SessionRequest r;
    set(r);
    return CommandMayWrite(r);
  };
  EXPECT_FALSE(may_write([](pb::SessionRequest& r) { r.mutable_read(); }));
  EXPECT_FALSE(may_write([](pb::SessionRequest& r) { r.mutable_alloc_buffer(); }));
  EXPECT_FALSE(may_write([](pb::SessionRequest& r) { r.mutable_free_buffer(); }));
  EXPECT_FALSE(may_write([](pb::SessionRequest& r) { r.mutable_grant_peer_read(); }));
  EXPECT_FALSE(may_write([](pb::SessionRequest& r) { r.mutable_cache_stats(); }));
  EXPECT_TRUE(may_write([](pb::SessionRequest& r) { r.mutable_write(); }));
  EXPECT_TRUE(may_write([](pb::SessionRequest& r) { r.mutable_memset(); }));
  EXPECT_TRUE(may_write([](pb::SessionRequest& r) { r.mutable_clear_buffer(); }));
  EXPECT_TRUE(may_write([](pb::SessionRequest& r) { r.mutable_copy(); }));
  EXPECT_TRUE(may_write([](pb::SessionRequest& r) { r.mutable_compute(); }));
  EXPECT_TRUE(may_write([](pb::SessionRequest& r) { r.mutable_peer_pull(); }));
  EXPECT_TRUE(may_write([](pb::SessionRequest& r) { r.mutable_batch(); }));
}

}  // namespace
}  // namespace tg::rpc
