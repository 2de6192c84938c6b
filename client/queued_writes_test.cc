// QueuedWrites: the writes come out in the order queued, as Compute inputs or as Write
// commands, with their bytes; taking them empties the queue.
#include "client/queued_writes.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

void Queue(QueuedWrites& q) {
  q.Add(3, 16, "abc", 3);
  q.Add(4, 0, "de", 2);
  q.Add(3, 17, "f", 1);
}

void ExpectWrites(const std::vector<pb::WriteRange>& got) {
  ASSERT_EQ(got.size(), 3);
  EXPECT_EQ(got[0].buffer(), 3);
  EXPECT_EQ(got[0].offset(), 16);
  EXPECT_EQ(got[0].data(), "abc");
  EXPECT_EQ(got[1].buffer(), 4);
  EXPECT_EQ(got[1].offset(), 0);
  EXPECT_EQ(got[1].data(), "de");
  EXPECT_EQ(got[2].buffer(), 3);
  EXPECT_EQ(got[2].offset(), 17);
  EXPECT_EQ(got[2].data(), "f");
}

TEST(QueuedWritesTest, CountsTheQueuedBytes) {
  QueuedWrites q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0);
  Queue(q);
  EXPECT_FALSE(q.empty());
  EXPECT_EQ(q.bytes(), 6);
}

TEST(QueuedWritesTest, BecomeTheInputsOfACompute) {
  QueuedWrites q;
  Queue(q);
  pb::Compute compute;
  compute.add_inputs()->set_data("earlier");  // one already there stays first.
  q.MoveInto(compute);
  ASSERT_EQ(compute.inputs_size(), 4);
  EXPECT_EQ(compute.inputs(0).data(), "earlier");
  ExpectWrites({compute.inputs().begin() + 1, compute.inputs().end()});
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0);
}

TEST(QueuedWritesTest, BecomeWriteCommands) {
  QueuedWrites q;
  Queue(q);
  std::vector<pb::SessionRequest> commands = q.TakeAsCommands();
  std::vector<pb::WriteRange> writes;
  for (const pb::SessionRequest& c : commands) {
    EXPECT_TRUE(c.has_write());
    EXPECT_EQ(c.id(), 0);
    writes.push_back(c.write());
  }
  ExpectWrites(writes);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0);
  EXPECT_TRUE(q.TakeAsCommands().empty());
}

}  // namespace
}  // namespace tg::rpc
