// Tests of server/session (in-process, no gRPC): every command, handles, range checks,
// quotas, the graph cache, run-time index errors, and that the session keeps working after
// each error.
#include "server/session.h"

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/byte_size.h"
#include "server/grant_table.h"
#include "server/graph_decoder.h"
#include "server/memory_reservation.h"
#include "server/metrics.h"
#include "server/server_testing.h"
#include "server/session_buffer_recycler.h"
#include "server/session_testing.h"

namespace tg::server {
namespace {

using testing::AllocRequest;
using testing::FreeRequest;
using testing::kExhausted;
using testing::kInvalid;
using testing::kNotFound;
using testing::kOk;
using testing::kPrecondition;
using testing::MatMulAdd;
using testing::ReadRequest;
using testing::RowsCompute;
using testing::WriteRequest;
namespace pb = ::tensorgrid::v1;

class SessionTest : public testing::SessionEnvTest {
 protected:
  std::unique_ptr<Session> NewSession(uint64_t mem_limit = 0) {
    SessionEnv env = env_;
    env.mem_limit = mem_limit;
    return std::make_unique<Session>("test", env);
  }

  uint64_t Alloc(Session& s, uint64_t size, uint32_t device = 0) {
    pb::SessionReply r = s.Handle(AllocRequest(next_id_++, device, size));
    EXPECT_EQ(r.code(), kOk) << r.message();
    return r.alloc_buffer().buffer();
  }

  // The proof that a session (or a fresh one) still works after an error.
  void ExpectValidCompute(Session& s, uint32_t seed = 5) {
    absl::Status st =
        testing::RunMatMulAddCheck([&](const pb::SessionRequest& r) { return s.Handle(r); }, seed);
    EXPECT_TRUE(st.ok()) << st;
  }

  uint64_t next_id_ = 1;
};

TEST_F(SessionTest, WriteReadRoundTrip) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, 100);
  EXPECT_NE(h, 0u);
  EXPECT_EQ(s->Handle(WriteRequest(2, h, 10, "hello")).code(), kOk);
  pb::SessionReply r = s->Handle(ReadRequest(3, h, 8, 9));
  ASSERT_EQ(r.code(), kOk) << r.message();
  EXPECT_EQ(r.id(), 3u);
  EXPECT_EQ(r.read().data(), std::string("\0\0hello\0\0", 9));  // new buffers read as zero.
  EXPECT_EQ(metrics_.buffers(), 1);
  EXPECT_EQ(metrics_.buffer_bytes(), 100);
}

TEST_F(SessionTest, RequestIdAndCommandRequired) {
  auto s = NewSession();
  pb::SessionReply r = s->Handle(AllocRequest(0, 0, 16));
  EXPECT_EQ(r.code(), kInvalid);
  pb::SessionRequest empty;
  empty.set_id(9);
  r = s->Handle(empty);
  EXPECT_EQ(r.code(), kInvalid);
  EXPECT_EQ(r.id(), 9u);
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, HandlesArePerSessionAndDieWhenFreed) {
  auto a = NewSession();
  auto b = NewSession();
  const uint64_t ha = Alloc(*a, 64);
  const uint64_t hb = Alloc(*b, 64);
  EXPECT_NE(ha, hb);
  EXPECT_EQ(b->Handle(ReadRequest(5, ha, 0, 4)).code(), kNotFound);  // another session's.
  EXPECT_EQ(a->Handle(FreeRequest(6, ha)).code(), kOk);
  EXPECT_EQ(a->Handle(ReadRequest(7, ha, 0, 4)).code(), kNotFound);  // freed.
  EXPECT_EQ(a->Handle(FreeRequest(8, ha)).code(), kNotFound);        // double free.
  EXPECT_EQ(a->Handle(FreeRequest(9, 0)).code(), kNotFound);
  const uint64_t ha2 = Alloc(*a, 64);
  EXPECT_NE(ha2, ha);  // handles are never reused.
  ExpectValidCompute(*a);
  ExpectValidCompute(*b);
}

TEST_F(SessionTest, RangesAreChecked) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, 64);
  EXPECT_EQ(s->Handle(WriteRequest(2, h, 60, "hello")).code(), kInvalid);
  EXPECT_EQ(s->Handle(WriteRequest(2, h, UINT64_MAX - 2, "hello")).code(), kInvalid);
  EXPECT_EQ(s->Handle(ReadRequest(3, h, 0, 65)).code(), kInvalid);
  EXPECT_EQ(s->Handle(ReadRequest(3, h, 65, 0)).code(), kInvalid);
  EXPECT_EQ(s->Handle(ReadRequest(3, h, 0, uint64_t{1} << 40)).code(), kInvalid);
  pb::SessionRequest m;
  m.set_id(4);
  m.mutable_memset()->mutable_range()->set_buffer(h);
  m.mutable_memset()->mutable_range()->set_offset(32);
  m.mutable_memset()->mutable_range()->set_size(33);
  EXPECT_EQ(s->Handle(m).code(), kInvalid);
  m.mutable_memset()->mutable_range()->set_size(32);
  m.mutable_memset()->set_value(256);
  EXPECT_EQ(s->Handle(m).code(), kInvalid);
  m.mutable_memset()->set_value(7);
  EXPECT_EQ(s->Handle(m).code(), kOk);
  EXPECT_EQ(s->Handle(ReadRequest(5, h, 62, 2)).read().data(), "\7\7");
  pb::SessionRequest c;
  c.set_id(6);
  c.mutable_clear_buffer()->set_buffer(h);
  c.mutable_clear_buffer()->set_value(300);
  EXPECT_EQ(s->Handle(c).code(), kInvalid);
  c.mutable_clear_buffer()->set_value(1);
  EXPECT_EQ(s->Handle(c).code(), kOk);
  EXPECT_EQ(s->Handle(ReadRequest(7, h, 0, 2)).read().data(), "\1\1");
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, InlineLimit) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, rpc::kMaxInlineBytes + 16);
  EXPECT_EQ(s->Handle(ReadRequest(2, h, 0, rpc::kMaxInlineBytes + 1)).code(), kInvalid);
  EXPECT_EQ(s->Handle(WriteRequest(3, h, 0, std::string(rpc::kMaxInlineBytes + 1, 'x'))).code(),
            kInvalid);
  EXPECT_EQ(s->Handle(ReadRequest(4, h, 0, rpc::kMaxInlineBytes)).code(), kOk);
}

// A batch runs its commands in order, each as if it had come alone: every command gets its
// own reply (errors included, the commands after an error still run), grouped in BatchReply
// messages that are split once they pass kMaxBatchReplyBytes. A batch inside a batch is
// refused, and so is a batch given to Handle.
TEST_F(SessionTest, BatchRunsEachCommandInOrderAndGroupsTheReplies) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, 2 * rpc::kMaxInlineBytes);
  const uint64_t big = rpc::kMaxInlineBytes;  // two such reads pass the group limit.
  static_assert(2 * rpc::kMaxInlineBytes > kMaxBatchReplyBytes);
  pb::SessionRequest batch;
  batch.set_id(77);
  pb::Batch* cmds = batch.mutable_batch();
  *cmds->add_commands() = WriteRequest(10, h, 0, "abc");
  *cmds->add_commands() = ReadRequest(11, h, 0, 3);      // sees the write before it.
  *cmds->add_commands() = ReadRequest(12, h + 1, 0, 3);  // no such buffer.
  *cmds->add_commands() = WriteRequest(13, h, 1, "XY");  // runs after the error.
  *cmds->add_commands() = ReadRequest(14, h, 0, 3);
  pb::SessionRequest* nested = cmds->add_commands();
  nested->set_id(15);
  *nested->mutable_batch()->add_commands() = ReadRequest(16, h, 0, 1);
  *cmds->add_commands() = ReadRequest(17, h, 0, big);
  *cmds->add_commands() = ReadRequest(18, h, big, big);
  *cmds->add_commands() = ReadRequest(19, h, 2, 1);

  std::vector<pb::SessionReply> messages;
  ASSERT_TRUE(s->Serve(batch, [&](const pb::SessionReply& m) {
    messages.push_back(m);
    return true;
  }));
  std::vector<pb::SessionReply> replies;
  for (const pb::SessionReply& m : messages) {
    EXPECT_EQ(m.id(), 77u);
    ASSERT_TRUE(m.has_batch());
    EXPECT_TRUE(m.ByteSizeLong() <= kMaxBatchReplyBytes || m.batch().replies_size() == 1);
    for (const pb::SessionReply& r : m.batch().replies()) replies.push_back(r);
  }
  EXPECT_GE(messages.size(), 3u);  // the two big reads cannot share a message.
  ASSERT_EQ(replies.size(), 9u);
  for (size_t i = 0; i < replies.size(); ++i) EXPECT_EQ(replies[i].id(), 10 + (i < 6 ? i : i + 1));
  EXPECT_EQ(replies[0].code(), kOk);
  EXPECT_EQ(replies[1].read().data(), "abc");
  EXPECT_EQ(replies[2].code(), kNotFound);
  EXPECT_EQ(replies[3].code(), kOk);
  EXPECT_EQ(replies[4].read().data(), "aXY");
  EXPECT_EQ(replies[5].code(), kInvalid);
  EXPECT_NE(replies[5].message().find("batch"), std::string::npos) << replies[5].message();
  EXPECT_EQ(replies[6].read().data().size(), big);
  EXPECT_EQ(replies[7].read().data().size(), big);
  EXPECT_EQ(replies[8].read().data(), "Y");

  // An empty batch gets an empty BatchReply; a stream that is gone stops the batch.
  pb::SessionRequest empty;
  empty.mutable_batch();
  int sent = 0;
  EXPECT_TRUE(s->Serve(empty, [&](const pb::SessionReply& m) {
    ++sent;
    EXPECT_TRUE(m.has_batch() && m.batch().replies_size() == 0);
    return true;
  }));
  EXPECT_EQ(sent, 1);
  sent = 0;
  EXPECT_FALSE(s->Serve(batch, [&](const pb::SessionReply&) { return ++sent < 2; }));
  EXPECT_EQ(sent, 2);  // the first group went, the second failed, nothing after it.
  batch.set_id(5);
  EXPECT_EQ(s->Handle(batch).code(), kInvalid);
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, CopyBetweenBuffersAndDevices) {
  auto s = NewSession();
  const uint64_t a = Alloc(*s, 64, 0);
  const uint64_t b = Alloc(*s, 64, 1);
  ASSERT_EQ(s->Handle(WriteRequest(2, a, 0, "abcdefgh")).code(), kOk);
  pb::SessionRequest c;
  c.set_id(3);
  c.mutable_copy()->mutable_src()->set_buffer(a);
  c.mutable_copy()->mutable_src()->set_offset(2);
  c.mutable_copy()->mutable_src()->set_size(4);
  c.mutable_copy()->set_dst_buffer(b);
  c.mutable_copy()->set_dst_offset(60);
  ASSERT_EQ(s->Handle(c).code(), kOk);
  EXPECT_EQ(s->Handle(ReadRequest(4, b, 60, 4)).read().data(), "cdef");
  // Overlapping copy inside one buffer.
  c.mutable_copy()->mutable_src()->set_buffer(a);
  c.mutable_copy()->set_dst_buffer(a);
  c.mutable_copy()->mutable_src()->set_offset(0);
  c.mutable_copy()->mutable_src()->set_size(6);
  c.mutable_copy()->set_dst_offset(2);
  ASSERT_EQ(s->Handle(c).code(), kOk);
  EXPECT_EQ(s->Handle(ReadRequest(5, a, 0, 8)).read().data(), "ababcdef");
  c.mutable_copy()->set_dst_offset(60);  // 6 bytes at 60 of 64.
  EXPECT_EQ(s->Handle(c).code(), kInvalid);
  c.mutable_copy()->set_dst_buffer(12345);
  EXPECT_EQ(s->Handle(c).code(), kNotFound);
}

TEST_F(SessionTest, ComputeMatchesNaiveLoopAndCachesGraph) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, MatMulAdd::kBufferBytes);
  MatMulAdd first(11);
  pb::SessionReply r = s->Handle(first.Compute(2, h, 0, 77, /*with_graph=*/true));
  ASSERT_EQ(r.code(), kOk) << r.message();
  EXPECT_TRUE(testing::NearlyEqual(testing::ToFloats(r.compute().outputs(0)), first.Expected()));
  EXPECT_EQ(metrics_.Serialize().find("tg_compute_total 1") != std::string::npos, true);
  // Same topology, new data, no graph: served from the cache.
  MatMulAdd second(12);
  r = s->Handle(second.Compute(3, h, 0, 77, /*with_graph=*/false));
  ASSERT_EQ(r.code(), kOk) << r.message();
  EXPECT_TRUE(testing::NearlyEqual(testing::ToFloats(r.compute().outputs(0)), second.Expected()));
  // Unknown key: the client must resend the graph.
  r = s->Handle(second.Compute(4, h, 0, 78, false));
  EXPECT_EQ(r.code(), kPrecondition);
  EXPECT_NE(r.message().find("graph not cached"), std::string::npos);
  // A key is per device.
  EXPECT_EQ(s->Handle(second.Compute(5, h, 1, 77, false)).code(), kPrecondition);
  // Freeing a buffer the graph uses drops the cached graph.
  ASSERT_EQ(s->Handle(FreeRequest(6, h)).code(), kOk);
  const uint64_t h2 = Alloc(*s, MatMulAdd::kBufferBytes);
  EXPECT_EQ(s->Handle(second.Compute(7, h2, 0, 77, false)).code(), kPrecondition);
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, ComputeArgumentErrors) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, MatMulAdd::kBufferBytes);
  MatMulAdd mm(3);
  pb::SessionRequest r = mm.Compute(2, h, 0, 1, true);
  r.mutable_compute()->set_device(9);
  EXPECT_EQ(s->Handle(r).code(), kInvalid);
  r = mm.Compute(3, h, 0, 1, true);
  r.mutable_compute()->mutable_outputs(0)->set_size(4096);  // outside the buffer.
  EXPECT_EQ(s->Handle(r).code(), kInvalid);
  r = mm.Compute(4, h, 0, 1, true);
  r.mutable_compute()->mutable_inputs(0)->set_offset(2040);
  EXPECT_EQ(s->Handle(r).code(), kInvalid);
  r = mm.Compute(5, h, 1, 1, true);  // buffer on CPU0, graph for CPU1.
  EXPECT_EQ(s->Handle(r).code(), kInvalid);
  ExpectValidCompute(*s);
}

// GET_ROWS with indices out of range at run time: the CPU backend reports INVALID_ARGUMENT
// (checked here rather than assumed), and the session goes on.
TEST_F(SessionTest, GetRowsIndexOutOfRangeAtRunTime) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, 1024);
  for (int32_t bad : {3, -1, 1 << 30}) {
    pb::SessionReply reply = s->Handle(RowsCompute(2, h, /*set_rows=*/false, 1, bad));
    EXPECT_EQ(reply.code(), kInvalid) << bad;
    EXPECT_NE(reply.message().find("out of range"), std::string::npos) << reply.message();
  }
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, SetRowsIndexOutOfRangeAtRunTime) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, 1024);
  pb::SessionReply reply = s->Handle(RowsCompute(2, h, /*set_rows=*/true, 0, 7));
  EXPECT_EQ(reply.code(), kInvalid) << reply.message();
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, MemoryQuota) {
  auto s = NewSession(/*mem_limit=*/1 << 20);
  const uint64_t a = Alloc(*s, 600 << 10);
  pb::SessionReply r = s->Handle(AllocRequest(2, 0, 600 << 10));
  EXPECT_EQ(r.code(), kExhausted);
  EXPECT_NE(r.message().find("limit"), std::string::npos) << r.message();
  EXPECT_EQ(s->Handle(AllocRequest(3, 0, UINT64_MAX)).code(), kExhausted);
  EXPECT_EQ(s->Handle(FreeRequest(4, a)).code(), kOk);
  Alloc(*s, 600 << 10);  // fits again after the free.
  EXPECT_EQ(s->bytes_held(), 600u << 10);
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, HostMemoryReserve) {
  auto s = NewSession();
  // A reserve larger than the host: every host-memory allocation would breach it.
  SetHostMemoryReserve(HostMemoryTotal() + 1);
  pb::SessionReply r = s->Handle(AllocRequest(2, 0, 4096));
  SetHostMemoryReserve(0);
  EXPECT_EQ(r.code(), kExhausted) << r.message();
  EXPECT_NE(r.message().find("--mem-reserve"), std::string::npos) << r.message();
  EXPECT_EQ(s->bytes_held(), 0u);  // the session's reservation went back too.
  Alloc(*s, 4096);                 // without the reserve it fits.
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, AllocationAboveFreeMemory) {
  auto s = NewSession();
  pb::SessionReply r = s->Handle(AllocRequest(2, 0, uint64_t{1} << 60));
  EXPECT_EQ(r.code(), kExhausted) << r.message();
  r = s->Handle(AllocRequest(3, 7, 16));
  EXPECT_EQ(r.code(), kInvalid);   // no device 7.
  EXPECT_EQ(s->bytes_held(), 0u);  // the refused allocation's reservation went back.
  ExpectValidCompute(*s);
}

TEST_F(SessionTest, GrantsDieWithTheBuffer) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, 64);
  pb::SessionRequest g;
  g.set_id(2);
  g.mutable_grant_peer_read()->set_buffer(h);
  pb::SessionReply r = s->Handle(g);
  ASSERT_EQ(r.code(), kOk);
  const std::string grant = r.grant().grant();
  EXPECT_EQ(grant.size(), 32u);
  EXPECT_NE(grants_.Find(grant), nullptr);
  EXPECT_EQ(s->Handle(g).grant().grant(), grant);  // one grant per buffer.
  ASSERT_EQ(s->Handle(FreeRequest(3, h)).code(), kOk);
  EXPECT_EQ(grants_.Find(grant), nullptr);
  g.mutable_grant_peer_read()->set_buffer(h);
  EXPECT_EQ(s->Handle(g).code(), kNotFound);
}

TEST_F(SessionTest, PeerPullWithoutPeerClientIsUnimplemented) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, 64);
  pb::SessionRequest p;
  p.set_id(2);
  p.mutable_peer_pull()->set_endpoint("127.0.0.1:1");
  p.mutable_peer_pull()->set_dst_buffer(h);
  EXPECT_EQ(s->Handle(p).code(), static_cast<int>(absl::StatusCode::kUnimplemented));
}

TEST_F(SessionTest, DestructorFreesEverything) {
  {
    auto s = NewSession();
    Alloc(*s, 1000);
    Alloc(*s, 2000, 1);
    ExpectValidCompute(*s);
    EXPECT_EQ(metrics_.buffers(), 2);
    EXPECT_EQ(metrics_.buffer_bytes(), 3000);
  }
  EXPECT_EQ(metrics_.buffers(), 0);
  EXPECT_EQ(metrics_.buffer_bytes(), 0);
}

TEST_F(SessionTest, ARecycledBufferIsTheSameMemoryAndReadsAsZero) {
  env_.recycler = std::make_shared<SessionBufferRecycler>(4 * SessionBufferRecycler::kMinBytes);
  const uint64_t size = SessionBufferRecycler::kMinBytes;
  {
    auto a = NewSession();
    const uint64_t h = Alloc(*a, size);
    ASSERT_EQ(a->Handle(WriteRequest(2, h, 1000, "another session's weights")).code(), kOk);
  }
  ASSERT_EQ(env_.recycler->kept_bytes(), size);
  auto b = NewSession();
  const uint64_t h = Alloc(*b, size);
  EXPECT_EQ(env_.recycler->kept_bytes(), 0u);  // b got the kept memory.
  pb::SessionReply r = b->Handle(ReadRequest(3, h, 990, 40));
  ASSERT_EQ(r.code(), kOk) << r.message();
  EXPECT_EQ(r.read().data(), std::string(40, '\0'));
  ExpectValidCompute(*b);
  // Kept memory never costs an allocation its room: a refused one gives it back first.
  ASSERT_EQ(b->Handle(FreeRequest(4, h)).code(), kOk);
  ASSERT_EQ(env_.recycler->kept_bytes(), size);
  EXPECT_EQ(b->Handle(AllocRequest(5, 0, uint64_t{1} << 60)).code(), kExhausted);
  EXPECT_EQ(env_.recycler->kept_bytes(), 0u);
}

TEST_F(SessionTest, CacheStats) {
  auto s = NewSession();
  s->AddUploadedBytes(10);
  s->AddCacheHitBytes(20);
  pb::SessionRequest r;
  r.set_id(1);
  r.mutable_cache_stats();
  pb::SessionReply reply = s->Handle(r);
  EXPECT_EQ(reply.cache_stats().uploaded_bytes(), 10u);
  EXPECT_EQ(reply.cache_stats().cache_hit_bytes(), 20u);
}

TEST(ByteSize, Parses) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("1234"), 1234u);
  EXPECT_EQ(*ParseByteSize("512M"), 512u << 20);
  EXPECT_EQ(*ParseByteSize("4G"), uint64_t{4} << 30);
  EXPECT_EQ(*ParseByteSize("4GiB"), uint64_t{4} << 30);
  EXPECT_EQ(*ParseByteSize("1.5k"), 1536u);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("G").ok());
  EXPECT_FALSE(ParseByteSize("-1").ok());
  EXPECT_FALSE(ParseByteSize("12X").ok());
  EXPECT_FALSE(ParseByteSize("99999999999T").ok());
}

// ---- ending and bounds (issue 37) ----------------------------------------------------------

pb::SessionRequest LeavesCompute(uint64_t id, uint64_t buffer, uint64_t key, int n) {
  pb::SessionRequest r;
  r.set_id(id);
  pb::Compute* c = r.mutable_compute();
  c->set_graph_key(key);
  for (int i = 0; i < n; ++i) {
    pb::TensorDesc* t = c->mutable_graph()->add_tensors();
    t->set_id(i + 1);
    t->set_type(0);  // F32
    for (int d = 0; d < 4; ++d) {
      t->add_ne(1);
      t->add_nb(4);
    }
    t->set_buffer(buffer);
  }
  return r;
}

class RecordingStream final : public CancellableStream {
 public:
  void Cancel(const absl::Status& status) override { why = status; }
  absl::Status why;
};

TEST_F(SessionTest, BatchOverTheCapIsRefusedBeforeAnyCommandRuns) {
  auto s = NewSession();
  pb::SessionRequest batch;
  batch.set_id(1);
  for (int i = 0; i <= kMaxBatchCommands; ++i) {
    *batch.mutable_batch()->add_commands() = AllocRequest(i + 1, 0, 16);
  }
  std::vector<pb::SessionReply> replies;
  s->Serve(batch, [&](const pb::SessionReply& r) {
    replies.push_back(r);
    return true;
  });
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].code(), kInvalid);
  EXPECT_NE(replies[0].message().find(absl::StrCat(kMaxBatchCommands + 1)), std::string::npos);
  EXPECT_NE(replies[0].message().find(absl::StrCat(kMaxBatchCommands)), std::string::npos);
  EXPECT_NE(replies[0].message().find("several batches"), std::string::npos);
  EXPECT_EQ(s->buffer_count(), 0u);
}

TEST_F(SessionTest, CancelledSessionAnswersCancelledWithoutRunning) {
  auto s = NewSession();
  s->Cancel();
  EXPECT_EQ(s->Handle(AllocRequest(1, 0, 16)).code(),
            static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_EQ(s->buffer_count(), 0u);
}

// Serves `commands` allocations in one batch `batch_id` (commands from batch_id + 1); returns
// the batch's reply.
pb::SessionReply ServeAllocBatch(Session& s, int batch_id, int commands) {
  pb::SessionRequest batch;
  batch.set_id(batch_id);
  for (int i = 0; i < commands; ++i) {
    *batch.mutable_batch()->add_commands() = AllocRequest(batch_id + 1 + i, 0, 16);
  }
  pb::SessionReply out;
  s.Serve(batch, [&](const pb::SessionReply& r) {
    out = r;
    return true;
  });
  return out;
}

// How many of a batch reply's commands ended with `code`.
int CountCode(const pb::SessionReply& out, int code) {
  int n = 0;
  for (const pb::SessionReply& r : out.batch().replies()) n += r.code() == code;
  return n;
}

// How many of a batch of `commands` allocations ran.
int RunAllocBatch(Session& s, int batch_id, int commands) {
  return CountCode(ServeAllocBatch(s, batch_id, commands), kOk);
}

TEST_F(SessionTest, AbandonedClientStopsABatchWithinOneCommand) {
  std::atomic<int> asked{0};
  SessionEnv env = env_;
  env.abandoned = [&] { return ++asked > 3; };         // the client goes during the third command.
  env.abandoned_poll_interval = absl::ZeroDuration();  // asked before every command.
  Session s("test", env);
  const pb::SessionReply out = ServeAllocBatch(s, 1, 10);
  ASSERT_EQ(out.batch().replies_size(), 10);
  EXPECT_EQ(CountCode(out, kOk), 3);
  EXPECT_EQ(CountCode(out, static_cast<int>(absl::StatusCode::kCancelled)), 7);
  EXPECT_TRUE(s.cancelled());
}

TEST_F(SessionTest, AbandonedIsAskedOnceAnInterval) {
  std::atomic<int> asked{0};
  SessionEnv env = env_;
  env.abandoned = [&] { return ++asked > 1; };  // gone from the second ask on.
  env.abandoned_poll_interval = absl::Hours(1);
  Session s("test", env);
  EXPECT_EQ(RunAllocBatch(s, 100, 20), 20);  // the first command asks; the rest trust it.
  EXPECT_EQ(asked.load(), 1);
  EXPECT_FALSE(s.cancelled());
}

TEST_F(SessionTest, AbandonedClientIsNoticedByTheFirstCommandAfterTheInterval) {
  std::atomic<int> asked{0};
  std::atomic<bool> gone{false};
  SessionEnv env = env_;
  env.abandoned = [&] {
    ++asked;
    return gone.load();
  };
  env.abandoned_poll_interval = absl::Milliseconds(20);
  Session s("test", env);
  EXPECT_EQ(RunAllocBatch(s, 100, 1), 1);
  gone = true;
  absl::SleepFor(absl::Milliseconds(40));
  EXPECT_EQ(RunAllocBatch(s, 200, 5), 0);
  EXPECT_TRUE(s.cancelled());
  const int after = asked.load();
  EXPECT_EQ(RunAllocBatch(s, 300, 1), 0);
  EXPECT_EQ(asked.load(), after);  // never asked again once cancelled.
}

TEST_F(SessionTest, CloseFreesBuffersAStreamStillNamesAndCancelsTheStream) {
  auto s = NewSession();
  const uint64_t h = Alloc(*s, 1 << 20);
  std::weak_ptr<SessionBuffer> buffer = *s->FindBuffer(h);
  auto stream = std::make_shared<RecordingStream>();
  ASSERT_TRUE(s->AddStream(stream));
  s->Close();
  EXPECT_TRUE(buffer.expired());
  EXPECT_EQ(stream->why.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s->buffer_count(), 0u);
  EXPECT_FALSE(s->AddStream(std::make_shared<RecordingStream>()));
  s->Close();  // idempotent.
}

// The cache's own bounds are tested in graph_cache_test.cc; here, that a session charges
// its graphs and that Free drops the graphs of the buffer with their charges.
TEST_F(SessionTest, CachedGraphsAreChargedToTheSessionAndGoWithTheirBuffer) {
  auto s = NewSession(/*mem_limit=*/uint64_t{4} << 20);
  const uint64_t h = Alloc(*s, 4096);
  const uint64_t before = s->bytes_held();
  pb::SessionRequest small = LeavesCompute(next_id_++, h, 1, 1000);
  const uint64_t charge = DecodedGraphBytes(small.compute().graph());
  ASSERT_EQ(s->Handle(small).code(), kOk) << s->Handle(small).message();
  EXPECT_EQ(s->bytes_held(), before + charge);
  // A graph over the limit is refused in the reply, naming its size.
  pb::SessionReply big = s->Handle(LeavesCompute(next_id_++, h, 2, 60000));
  EXPECT_EQ(big.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(big.message().find("60000 tensors"), std::string::npos) << big.message();
  // Freeing the buffer drops its graphs and their charges: the key is unknown after.
  ASSERT_EQ(s->Handle(FreeRequest(next_id_++, h)).code(), kOk);
  EXPECT_EQ(s->bytes_held(), 0u);
  const uint64_t h2 = Alloc(*s, 4096);
  pb::SessionRequest by_key;
  by_key.set_id(next_id_++);
  by_key.mutable_compute()->set_graph_key(1);
  by_key.mutable_compute()->add_inputs()->set_buffer(h2);
  EXPECT_EQ(s->Handle(by_key).code(), kPrecondition);
}

}  // namespace
}  // namespace tg::server
