// QueuedWrites: the writes come out in the order queued, as Compute inputs or as Write
// commands, with their bytes; taking them empties the queue; a Compute takes only those of
// its own device.
#include "client/queued_writes.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

void Queue(QueuedWrites& q) {
  q.Add(0, 3, 16, "abc", 3);
  q.Add(0, 4, 0, "de", 2);
  q.Add(0, 3, 17, "f", 1);
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

TEST(QueuedWritesTest, AComputeTakesOnlyTheWritesOfItsDevice) {
  QueuedWrites q;
  q.Add(1, 7, 0, "x", 1);
  Queue(q);  // device 0
  q.Add(1, 7, 1, "yz", 2);
  EXPECT_TRUE(q.HasFor(0));
  EXPECT_TRUE(q.HasFor(1));
  EXPECT_FALSE(q.HasFor(2));
  pb::Compute compute;
  compute.set_device(0);
  q.MoveInto(compute);
  ExpectWrites({compute.inputs().begin(), compute.inputs().end()});
  EXPECT_FALSE(q.HasFor(0));
  EXPECT_EQ(q.bytes(), 3);
  // Device 1's stay, in their order, for its own Compute or as commands.
  std::vector<pb::SessionRequest> rest = q.TakeAsCommands();
  ASSERT_EQ(rest.size(), 2);
  EXPECT_EQ(rest[0].write().data(), "x");
  EXPECT_EQ(rest[1].write().data(), "yz");
  EXPECT_TRUE(q.empty());
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
