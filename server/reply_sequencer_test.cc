// Tests of server/reply_sequencer: replies filed out of order leave in request order, a
// batch leaves whole (split past kMaxBatchReplyBytes), and a failed send drops the rest.
#include "server/reply_sequencer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

pb::SessionReply ReplyWithId(uint64_t id, size_t payload = 0) {
  pb::SessionReply r;
  r.set_id(id);
  if (payload > 0) r.mutable_read()->set_data(std::string(payload, 'x'));
  return r;
}

TEST(ReplySequencerTest, OutOfOrderFillsLeaveInOrder) {
  std::vector<uint64_t> sent;
  ReplySequencer seq([&](const pb::SessionReply& r) {
    sent.push_back(r.id());
    return true;
  });
  ReplySequencer::Group* g1 = seq.Open(1, false, 1);
  ReplySequencer::Group* g2 = seq.Open(2, false, 1);
  ReplySequencer::Group* g3 = seq.Open(3, false, 1);
  seq.Fill(g3, 0, ReplyWithId(3));
  seq.Fill(g2, 0, ReplyWithId(2));
  EXPECT_TRUE(sent.empty());  // 1 is not in yet.
  seq.Fill(g1, 0, ReplyWithId(1));
  EXPECT_EQ(sent, (std::vector<uint64_t>{1, 2, 3}));
  seq.WaitSent();
  EXPECT_TRUE(seq.ok());
}

TEST(ReplySequencerTest, BatchLeavesWholeAndSplitsPastTheLimit) {
  std::vector<pb::SessionReply> sent;
  ReplySequencer seq([&](const pb::SessionReply& r) {
    sent.push_back(r);
    return true;
  });
  ReplySequencer::Group* empty = seq.Open(7, true, 0);
  (void)empty;
  ASSERT_EQ(sent.size(), 1u);  // an empty batch is answered at once.
  EXPECT_TRUE(sent[0].has_batch());
  EXPECT_EQ(sent[0].batch().replies_size(), 0);
  const size_t big = kMaxBatchReplyBytes / 2 + 16;  // two do not fit in one message.
  ReplySequencer::Group* g = seq.Open(8, true, 3);
  seq.Fill(g, 2, ReplyWithId(12));
  seq.Fill(g, 0, ReplyWithId(10, big));
  EXPECT_EQ(sent.size(), 1u);
  seq.Fill(g, 1, ReplyWithId(11, big));
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[1].id(), 8u);
  ASSERT_EQ(sent[1].batch().replies_size(), 1);
  EXPECT_EQ(sent[1].batch().replies(0).id(), 10u);
  ASSERT_EQ(sent[2].batch().replies_size(), 2);
  EXPECT_EQ(sent[2].batch().replies(0).id(), 11u);
  EXPECT_EQ(sent[2].batch().replies(1).id(), 12u);
}

TEST(ReplySequencerTest, FailedSendDropsTheRest) {
  int sends = 0;
  ReplySequencer seq([&](const pb::SessionReply&) {
    ++sends;
    return false;
  });
  ReplySequencer::Group* g1 = seq.Open(1, false, 1);
  ReplySequencer::Group* g2 = seq.Open(2, false, 1);
  seq.Fill(g1, 0, ReplyWithId(1));
  EXPECT_FALSE(seq.ok());
  seq.Fill(g2, 0, ReplyWithId(2));
  seq.WaitSent();
  EXPECT_EQ(sends, 1);
}

}  // namespace
}  // namespace tg::server
