// ReduceMailbox: a piece put before or while it is waited for is taken once; a wait gives up
// at its deadline or with the check's error; pieces of a finished collective are dropped;
// the held bytes are capped; a piece is never handed to another grant.
#include "server/reduce_mailbox.h"

#include <thread>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

PieceKey Key(const std::string& grant, uint64_t collective, uint32_t step) {
  return PieceKey{grant, collective, step, 0, 1};
}

absl::Status Fine() { return absl::OkStatus(); }

TEST(ReduceMailboxTest, PieceBeforeTheWaitIsTakenOnce) {
  ReduceMailbox box;
  ASSERT_TRUE(box.Put(Key("g", 7, 0), "abcd").ok());
  EXPECT_EQ(box.held_bytes(), 4u);
  EXPECT_EQ(box.Put(Key("g", 7, 0), "abcd").code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<std::string> got =
      box.Take(Key("g", 7, 0), absl::Now() + absl::Seconds(1), absl::Milliseconds(10), Fine);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "abcd");
  EXPECT_EQ(box.held_bytes(), 0u);
  got =
      box.Take(Key("g", 7, 0), absl::Now() + absl::Milliseconds(50), absl::Milliseconds(10), Fine);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ReduceMailboxTest, WaiterWakesWhenThePieceComes) {
  ReduceMailbox box;
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(box.Put(Key("g", 1, 3), "xy").ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got =
      box.Take(Key("g", 1, 3), absl::Now() + absl::Seconds(10), absl::Seconds(5), Fine);
  late.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "xy");
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // woken, not polled.
}

TEST(ReduceMailboxTest, AnotherGrantsPieceIsNotTaken) {
  ReduceMailbox box;
  ASSERT_TRUE(box.Put(Key("other", 1, 0), "zz").ok());
  absl::StatusOr<std::string> got = box.Take(
      Key("mine", 1, 0), absl::Now() + absl::Milliseconds(30), absl::Milliseconds(10), Fine);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("rank 1"), std::string::npos) << got.status();
}

TEST(ReduceMailboxTest, CheckErrorEndsTheWait) {
  ReduceMailbox box;
  int polls = 0;
  absl::StatusOr<std::string> got =
      box.Take(Key("g", 1, 0), absl::Now() + absl::Seconds(30), absl::Milliseconds(5), [&] {
        return ++polls < 3 ? absl::OkStatus() : absl::UnavailableError("peer unreachable: x:1");
      });
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(polls, 3);
}

TEST(ReduceMailboxTest, DropRemovesOneCollectivesPieces) {
  ReduceMailbox box;
  ASSERT_TRUE(box.Put(Key("g", 1, 0), "aa").ok());
  ASSERT_TRUE(box.Put(Key("g", 1, 1), "bb").ok());
  ASSERT_TRUE(box.Put(Key("g", 2, 0), "cc").ok());
  box.Drop("g", 1);
  EXPECT_EQ(box.held_bytes(), 2u);
  EXPECT_TRUE(
      box.Take(Key("g", 2, 0), absl::Now() + absl::Seconds(1), absl::Milliseconds(10), Fine).ok());
}

TEST(ReduceMailboxTest, HeldBytesAreCapped) {
  ReduceMailbox box;
  const std::string big(ReduceMailbox::kMaxHeldBytes / 2, 'x');
  ASSERT_TRUE(box.Put(Key("g", 1, 0), big).ok());
  ASSERT_TRUE(box.Put(Key("g", 1, 1), big).ok());
  const absl::Status s = box.Put(Key("g", 1, 2), "y");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(box.held_bytes(), ReduceMailbox::kMaxHeldBytes);
}

}  // namespace
}  // namespace tg::server
