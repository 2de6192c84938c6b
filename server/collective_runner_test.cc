// CollectiveRunner through a Session (no transport): every malformed AllReduce is refused
// naming what is wrong, before anything is read, written or sent; a grant of another
// session is PERMISSION_DENIED; a peer outside --peers is PERMISSION_DENIED before any
// connection; one server's part alone sums its two devices (the sum a loop here makes) into
// both, once for the two commands of the collective; PeerReduce takes only this server's
// grants and pieces of at most one chunk.
//
// And against a real rpc-server on loopback (in-process) as the peer: the pieces a session's
// all-reduce sends there carry its sender key, and when that session ends
// (PeerPushes::SenderEnded) the peer drops them from its all-reduce mailbox, their charge
// back to the receiving session, while another sending session's pieces stay; a piece of
// the ended session that comes after is refused. A session that ends while its all-reduce
// waits for a live peer that never sends gets CANCELLED at once, not after kPieceWait.
//
// And between two real rpc-servers, each running its part: a decode-sized all-reduce goes
// over peer links when both offer them (every piece on a link, both sums right), and over
// the stream, with the same sums, when one server offers none. Three servers' DIRECT
// all-reduce ends on every rank with the bits of the sum in rank order, over links and
// over streams.
#include "server/collective_runner.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/allreduce_schedule.h"
#include "server/grant_table.h"
#include "server/memory_reservation.h"
#include "server/metrics.h"
#include "server/peer_client.h"
#include "server/peer_pushes.h"
#include "server/rpc_server.h"
#include "server/server_testing.h"
#include "server/service.h"
#include "server/session.h"
#include "tests/lib/test_util.h"

namespace tg::server {
namespace {

using testing::AllocRequest;
using testing::Bytes;
using testing::Floats;
using testing::ReadRequest;
using testing::ToFloats;
using testing::WriteRequest;
namespace pb = ::tensorgrid::v1;

constexpr uint64_t kCount = 40;

class CollectiveRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = testing::TwoCpuDevices();
    ASSERT_EQ(devices_.size(), 2u);
    PeerClientOptions peer;
    auto allowed = PeerAllowList::Parse("127.0.0.1:1");  // nothing that listens.
    ASSERT_TRUE(allowed.ok()) << allowed.status();
    peer.allowed = *allowed;
    peers_ = std::make_unique<PeerClient>(peer);
    runner_ = std::make_unique<CollectiveRunner>(peers_.get(), &grants_, nullptr);
    session_ = NewSession("s1");
    for (uint32_t d = 0; d < 2; ++d) {
      buffers_.push_back(Alloc(*session_, d));
      in_.push_back(Floats(kCount, 7 + d));
      ASSERT_EQ(session_->Handle(WriteRequest(1, buffers_[d], 16, Bytes(in_[d]))).code(), 0);
    }
  }

  std::unique_ptr<Session> NewSession(const std::string& id) {
    SessionEnv env;
    env.devices = devices_;
    env.grants = &grants_;
    env.peers = peers_.get();
    env.collectives = runner_.get();
    return std::make_unique<Session>(id, std::move(env));
  }

  uint64_t Alloc(Session& s, uint32_t device) {
    pb::SessionReply r = s.Handle(AllocRequest(1, device, 16 + kCount * 4));
    EXPECT_EQ(r.code(), 0) << r.message();
    return r.alloc_buffer().buffer();
  }

  std::string GrantOf(Session& s, uint64_t buffer) {
    pb::SessionRequest r;
    r.set_id(1);
    r.mutable_grant_peer_read()->set_buffer(buffer);
    return s.Handle(r).grant().grant();
  }

  // The command for device `device` of a one-server collective over both buffers.
  pb::SessionRequest Command(uint32_t device) {
    pb::SessionRequest r;
    r.set_id(2);
    pb::AllReduce* a = r.mutable_all_reduce();
    a->set_collective(9);
    a->add_servers()->set_endpoint("127.0.0.1:50052");
    a->set_rank(0);
    for (uint32_t d = 0; d < 2; ++d) {
      pb::CollectiveTensor* t = a->add_tensors();
      t->set_device(d);
      t->set_buffer(buffers_[d]);
      t->set_offset(16);
    }
    a->set_count(kCount);
    a->set_device(device);
    return r;
  }

  std::vector<float> Read(uint32_t d) {
    return ToFloats(session_->Handle(ReadRequest(1, buffers_[d], 16, kCount * 4)).read().data());
  }

  std::vector<Device*> devices_;
  GrantTable grants_;
  std::unique_ptr<PeerClient> peers_;
  std::unique_ptr<CollectiveRunner> runner_;
  std::unique_ptr<Session> session_;
  std::vector<uint64_t> buffers_;
  std::vector<std::vector<float>> in_;
};

TEST_F(CollectiveRunnerTest, OneServerSumsItsDevicesIntoBoth) {
  for (uint32_t d = 0; d < 2; ++d) {
    pb::SessionReply r = session_->Handle(Command(d));
    ASSERT_EQ(r.code(), 0) << r.message();
  }
  for (uint32_t d = 0; d < 2; ++d) {
    const std::vector<float> got = Read(d);
    ASSERT_EQ(got.size(), kCount);
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(got[i], in_[0][i] + in_[1][i]) << i;
  }
}

TEST_F(CollectiveRunnerTest, MalformedCommandsAreRefusedNamingTheValue) {
  struct Case {
    const char* what;
    std::function<void(pb::AllReduce*)> edit;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"no servers", [](pb::AllReduce* a) { a->clear_servers(); }, "over 0 servers"},
      {"rank past the servers", [](pb::AllReduce* a) { a->set_rank(1); }, "rank 1 of 1"},
      {"no tensors", [](pb::AllReduce* a) { a->clear_tensors(); }, "0 tensors"},
      {"no elements", [](pb::AllReduce* a) { a->set_count(0); }, "of 0 f32 elements"},
      {"too many elements",
       [](pb::AllReduce* a) { a->set_count(CollectiveRunner::kMaxBytes / 4 + 1); },
       "f32 elements (1 to"},
      {"range past the buffer", [](pb::AllReduce* a) { a->set_count(kCount + 1); }, "bytes"},
      {"buffer of another device", [](pb::AllReduce* a) { a->mutable_tensors(1)->set_device(0); },
       "is on device 1, not 0"},
      {"unknown buffer", [](pb::AllReduce* a) { a->mutable_tensors(0)->set_buffer(12345); },
       "no buffer with handle"},
      {"command for a device not listed", [](pb::AllReduce* a) { a->set_device(5); },
       "for device 5 lists no tensor"},
      {"unknown algorithm",
       [](pb::AllReduce* a) { a->set_algorithm(static_cast<pb::AllReduce::Algorithm>(77)); },
       "all_reduce.algorithm 77 is not one of AUTO (0), RING (1), BUTTERFLY (2), DIRECT (3)"},
  };
  for (const Case& c : cases) {
    pb::SessionRequest r = Command(0);
    r.mutable_all_reduce()->set_collective(100 + (&c - cases.data()));
    c.edit(r.mutable_all_reduce());
    pb::SessionReply reply = session_->Handle(r);
    EXPECT_NE(reply.code(), 0) << c.what;
    EXPECT_NE(reply.message().find(c.says), std::string::npos) << c.what << ": " << reply.message();
  }
  EXPECT_EQ(Read(0), in_[0]);  // nothing written.
}

TEST_F(CollectiveRunnerTest, UnknownAlgorithmIsInvalidArgumentAndRunsNothing) {
  pb::SessionRequest r = Command(0);
  r.mutable_all_reduce()->set_algorithm(static_cast<pb::AllReduce::Algorithm>(77));
  pb::SessionReply reply = session_->Handle(r);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << reply.message();
  EXPECT_NE(reply.message().find("algorithm 77"), std::string::npos) << reply.message();
  EXPECT_EQ(Read(0), in_[0]);
  EXPECT_EQ(Read(1), in_[1]);
}

TEST_F(CollectiveRunnerTest, GrantOfAnotherSessionIsRefused) {
  std::unique_ptr<Session> other = NewSession("s2");
  const std::string foreign = GrantOf(*other, Alloc(*other, 0));
  pb::SessionRequest r = Command(0);
  pb::AllReduce* a = r.mutable_all_reduce();
  a->mutable_servers(0)->set_grant(foreign);
  a->add_servers()->set_endpoint("127.0.0.1:1");
  pb::SessionReply reply = session_->Handle(r);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kPermissionDenied)) << reply.message();
  EXPECT_NE(reply.message().find("not this session's grant"), std::string::npos) << reply.message();
}

TEST_F(CollectiveRunnerTest, PeerOutsideTheAllowListIsRefusedBeforeAnyConnection) {
  pb::SessionRequest r = Command(0);
  pb::AllReduce* a = r.mutable_all_reduce();
  a->mutable_servers(0)->set_grant(GrantOf(*session_, buffers_[0]));
  a->add_servers()->set_endpoint("127.0.0.1:2");
  pb::SessionReply reply = session_->Handle(r);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kPermissionDenied)) << reply.message();
  EXPECT_NE(reply.message().find("127.0.0.1:2"), std::string::npos) << reply.message();
  EXPECT_EQ(Read(0), in_[0]);
}

TEST_F(CollectiveRunnerTest, PeerReduceTakesOnlyThisServersGrantsAndOneChunk) {
  pb::PeerReduceRequest req;
  req.set_grant("not-a-grant");
  EXPECT_EQ(runner_->Receive(req).code(), absl::StatusCode::kNotFound);
  req.set_grant(GrantOf(*session_, buffers_[0]));
  req.set_data(std::string(rpc::kChunkBytes + 1, 'x'));
  EXPECT_EQ(runner_->Receive(req).code(), absl::StatusCode::kInvalidArgument);
  req.set_data("abcd");
  EXPECT_TRUE(runner_->Receive(req).ok());
  EXPECT_EQ(runner_->held_bytes(), 4u);
}

// This server (A: a runner whose sessions' keys PeerPushes draws) and a real peer server B
// holding a receiving session's grant, whose pieces are charged to `held`.
class CollectiveRunnerPeerTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kElements = 1024;
  static constexpr uint64_t kPieceBytes = kElements * sizeof(float);

  void SetUp() override {
    ServerConfig config;
    config.port = 0;
    config.devices = testing::TwoCpuDevices();
    auto server = RpcServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    peer_ = std::move(*server);
    auto b = config.devices[0]->default_buffer_type()->Allocate(kPieceBytes);
    ASSERT_TRUE(b.ok()) << b.status();
    receiver_buffer_ = std::make_shared<SessionBuffer>(*std::move(b), 0, kPieceBytes, nullptr);
    receiver_account_ = std::make_shared<MailboxAccount>(
        "receiver", [this](uint64_t n) { return MemoryReservation::Reserve(&held_, 0, n); },
        [this](uint64_t n) { held_ -= n; }, &peer_->metrics());
    receiver_grant_ = peer_->service().grants().Grant(receiver_buffer_, receiver_account_);

    peers_ = std::make_unique<PeerClient>(PeerClientOptions{});  // loopback is allowed.
    pushes_ = std::make_unique<PeerPushes>(peers_.get(), &grants_, nullptr);
    runner_ = std::make_unique<CollectiveRunner>(peers_.get(), &grants_, nullptr, pushes_.get());
    auto a = config.devices[0]->default_buffer_type()->Allocate(kPieceBytes);
    ASSERT_TRUE(a.ok()) << a.status();
    buffer_ = std::make_shared<SessionBuffer>(*std::move(a), 0, kPieceBytes, nullptr);
    ASSERT_TRUE(buffer_->Write(0, Floats(kElements, 3).data(), kPieceBytes).ok());
    grant_ = grants_.Grant(buffer_);
  }

  void TearDown() override {
    runner_.reset();
    if (peer_ != nullptr) peer_->Shutdown(0);
  }

  // Session `session` runs collective `collective` over A (rank 0) and B, B never taking
  // part: A's pieces wait in B's mailbox, and the piece A waits for is put here unless
  // `b_answers` is false (then A waits until `cancelled` says its session ended).
  absl::Status AllReduceIntoThePeer(const std::string& session, uint64_t collective,
                                    bool b_answers = true,
                                    const std::function<bool()>& cancelled = {}) {
    pb::AllReduce a;
    a.set_collective(collective);
    pb::CollectiveServer* self = a.add_servers();
    self->set_endpoint("127.0.0.1:1");  // never dialled: this server's own rank.
    self->set_grant(grant_);
    pb::CollectiveServer* peer = a.add_servers();
    peer->set_endpoint(peer_->address());
    peer->set_grant(receiver_grant_);
    a.set_rank(0);
    pb::CollectiveTensor* t = a.add_tensors();
    t->set_buffer(7);
    a.set_count(kElements);
    a.set_algorithm(pb::AllReduce::BUTTERFLY);
    const std::vector<ExchangeStep> steps = ButterflySchedule(2, 0, kElements);
    if (steps.size() != 1 || steps[0].recv_from != 1) {
      return absl::InternalError("the butterfly of two ranks is not one exchange with rank 1");
    }
    pb::PeerReduceRequest from_b;
    from_b.set_grant(grant_);
    from_b.set_collective(collective);
    from_b.set_step(steps[0].id);
    from_b.set_from_rank(1);
    from_b.set_data(Bytes(Floats(kElements, 5)));
    if (b_answers) TG_RETURN_IF_ERROR(runner_->Receive(from_b));
    return runner_->Run(
        session,
        [this](uint64_t h) -> absl::StatusOr<std::shared_ptr<SessionBuffer>> {
          if (h != 7) return absl::NotFoundError("no such buffer");
          return buffer_;
        },
        a, cancelled);
  }

  // B's mailbox once it holds `bytes` (the stream delivers in the background), at most 10 s.
  double PeerMailboxOnce(double bytes) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (peer_->metrics().peer_mailbox_bytes() != bytes && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return peer_->metrics().peer_mailbox_bytes();
  }

  std::unique_ptr<RpcServer> peer_;
  std::atomic<uint64_t> held_{0};
  std::shared_ptr<SessionBuffer> receiver_buffer_;
  std::shared_ptr<MailboxAccount> receiver_account_;
  std::string receiver_grant_;

  GrantTable grants_;
  std::unique_ptr<PeerClient> peers_;
  std::unique_ptr<PeerPushes> pushes_;
  std::unique_ptr<CollectiveRunner> runner_;
  std::shared_ptr<SessionBuffer> buffer_;
  std::string grant_;
};

TEST_F(CollectiveRunnerPeerTest, AWaitForAPeerGivesUpWhenTheSessionEnds) {
  // B never sends its piece and is alive: only the session's end can end A's wait
  // (kPieceWait, a minute, otherwise).
  std::atomic<bool> ended{false};
  std::future<absl::Status> waiting = std::async(std::launch::async, [&] {
    return AllReduceIntoThePeer("waiting", 4, /*b_answers=*/false, [&] { return ended.load(); });
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  ended = true;
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const absl::Status s = waiting.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(s.message().find("all_reduce: the session ended"), std::string::npos) << s;
}

TEST_F(CollectiveRunnerPeerTest, AnEndedSendersPiecesLeaveThePeersMailboxAndNobodyElses) {
  ASSERT_EQ(held_.load(), 0u);
  const absl::Status ended = AllReduceIntoThePeer("ending", 1);
  ASSERT_TRUE(ended.ok()) << ended;
  const absl::Status stays = AllReduceIntoThePeer("staying", 2);
  ASSERT_TRUE(stays.ok()) << stays;
  ASSERT_EQ(PeerMailboxOnce(2 * kPieceBytes), 2.0 * kPieceBytes);
  EXPECT_EQ(held_.load(), 2 * kPieceBytes);
  // The key "ending"'s pieces carry (drawn already: the same one again).
  const std::string key = pushes_->SenderKey("ending", peer_->address());
  ASSERT_FALSE(key.empty());

  pushes_->SenderEnded("ending");  // returns once B answered the notice.
  EXPECT_EQ(peer_->metrics().peer_mailbox_bytes(), 1.0 * kPieceBytes);
  EXPECT_EQ(held_.load(), kPieceBytes);

  // A piece of the ended session still on its way is refused, not filed.
  PeerReduceStream late(peers_->ChannelFor(peer_->address()).value(), peer_->address(), "", key);
  pb::PeerReduceRequest piece;
  piece.set_grant(receiver_grant_);
  piece.set_collective(3);
  piece.set_from_rank(0);
  piece.set_data(std::string(kPieceBytes, 'x'));
  ASSERT_TRUE(late.Send(piece).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (late.status().ok() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition) << late.status();
  EXPECT_EQ(peer_->metrics().peer_mailbox_bytes(), 1.0 * kPieceBytes);
  EXPECT_EQ(held_.load(), kPieceBytes);

  pushes_->SenderEnded("staying");
  EXPECT_EQ(peer_->metrics().peer_mailbox_bytes(), 0.0);
  EXPECT_EQ(held_.load(), 0u);
}

// Two servers each run their part of one all-reduce, as two sessions' commands would.
class CollectiveRunnerTwoServersTest : public ::testing::Test {
 protected:
  // A decode step's row of a 2048-wide model, unless a test sets another size.
  uint64_t elements_ = 2048;

  std::unique_ptr<RpcServer> StartServer(bool links) {
    ServerConfig config;
    config.port = 0;
    config.devices = {testing::TwoCpuDevices()[0]};
    if (!links) config.peer_link_port.reset();
    auto server = RpcServer::Start(config);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  // Runs collective `collective` on servers a (values 1, 2, ...) and b (values 0.5, 1, ...);
  // each ends with the sum or an error.
  void AllReduce(RpcServer& a, RpcServer& b, uint64_t collective) {
    AllReduceOn({&a, &b}, collective, pb::AllReduce::AUTO);
  }

  // Runs collective `collective` with `algorithm` on `servers` (rank r's values: (i + 1) / 2^r,
  // plus random ones for three servers or more, whose float sum depends on the order); every
  // rank ends with the sum in rank order, bit for bit, or an error.
  void AllReduceOn(std::vector<RpcServer*> servers, uint64_t collective,
                   pb::AllReduce::Algorithm algorithm) {
    const int m = static_cast<int>(servers.size());
    ASSERT_LE(m, kMaxTestServers);
    std::shared_ptr<SessionBuffer>* buffers = buffers_;
    std::string* grants = grants_;
    std::vector<float> want(elements_, 0.0f);
    for (int r = 0; r < m; ++r) {
      // Each server's buffer and grant, made once as a session's would be.
      if (buffers[r] == nullptr) {
        auto mem = testing::TwoCpuDevices()[0]->default_buffer_type()->Allocate(elements_ * 4);
        ASSERT_TRUE(mem.ok()) << mem.status();
        buffers[r] = std::make_shared<SessionBuffer>(*std::move(mem), 0, elements_ * 4, nullptr);
        grants[r] = servers[r]->service().grants().Grant(buffers[r]);
      }
      std::vector<float> v = m > 2 ? tg::testing::RandomFloats(elements_, 40 + r)
                                   : std::vector<float>(elements_, 0.0f);
      for (uint64_t i = 0; i < elements_; ++i) {
        v[i] += std::ldexp(static_cast<float>(i + 1), -r);
        want[i] = r == 0 ? v[i] : want[i] + v[i];
      }
      ASSERT_TRUE(buffers[r]->Write(0, v.data(), elements_ * 4).ok());
    }
    std::vector<std::future<absl::Status>> done(m);
    for (int r = 0; r < m; ++r) {
      pb::AllReduce cmd;
      cmd.set_collective(collective);
      for (int s = 0; s < m; ++s) {
        pb::CollectiveServer* server = cmd.add_servers();
        server->set_endpoint(servers[s]->address());
        server->set_grant(grants[s]);
      }
      cmd.set_rank(r);
      cmd.add_tensors()->set_buffer(7);
      cmd.set_count(elements_);
      cmd.set_algorithm(algorithm);
      std::shared_ptr<SessionBuffer> buffer = buffers[r];
      RpcServer* server = servers[r];
      done[r] = std::async(std::launch::async, [server, r, cmd, buffer] {
        return server->service().collectives().Run(
            absl::StrCat("session-", r),
            [&](uint64_t h) -> absl::StatusOr<std::shared_ptr<SessionBuffer>> { return buffer; },
            cmd);
      });
    }
    for (int r = 0; r < m; ++r) {
      const absl::Status s = done[r].get();
      ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s;
      std::vector<float> sum(elements_);
      ASSERT_TRUE(buffers[r]->Read(0, sum.data(), elements_ * 4).ok());
      for (uint64_t i = 0; i < elements_; ++i) {
        ASSERT_EQ(sum[i], want[i]) << "rank " << r << " element " << i;
      }
    }
  }

  // Starts server a_ and b_, each offering links or not, and runs three collectives on them.
  void ThreeCollectives(bool a_links, bool b_links) {
    a_ = StartServer(a_links);
    b_ = StartServer(b_links);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    for (uint64_t c = 1; c <= 3; ++c) AllReduce(*a_, *b_, c);
  }
  uint64_t LinkPiecesSent(RpcServer& s) { return s.service().collectives().link_pieces_sent(); }

  std::unique_ptr<RpcServer> a_, b_;
  static constexpr int kMaxTestServers = 3;
  // After the servers: they go first (their grants are the servers').
  std::shared_ptr<SessionBuffer> buffers_[kMaxTestServers];
  std::string grants_[kMaxTestServers];
};

TEST_F(CollectiveRunnerTwoServersTest, DecodeSizedPiecesGoOverLinksWhenBothOfferThem) {
  ThreeCollectives(true, true);
  // One link each way, for the session's grant, carried every piece.
  EXPECT_EQ(LinkPiecesSent(*a_), 3u);
  EXPECT_EQ(LinkPiecesSent(*b_), 3u);
  EXPECT_EQ(a_->service().links().links(), 1u);
  EXPECT_EQ(b_->service().links().links(), 1u);
}

TEST_F(CollectiveRunnerTwoServersTest, TheLargestLinkPieceGoesBothWaysAtOnce) {
  // Both servers write each other a whole piece before either reads (the butterfly of two):
  // each piece must fit the sockets' buffers.
  elements_ = kMaxLinkPieceBytes / sizeof(float);
  ThreeCollectives(true, true);
  EXPECT_EQ(LinkPiecesSent(*a_), 3u);
  EXPECT_EQ(LinkPiecesSent(*b_), 3u);
}

TEST_F(CollectiveRunnerTwoServersTest, ALinkThePeerClosedIsDialedAgain) {
  ThreeCollectives(true, true);
  // B drops its links (as for a piece it refused); A sees the link closed and dials again.
  b_->service().links().Revoked(grants_[1]);
  ASSERT_EQ(b_->service().links().links(), 0u);
  absl::SleepFor(absl::Milliseconds(50));  // the close reaches A.
  for (uint64_t c = 4; c <= 5; ++c) AllReduce(*a_, *b_, c);
  EXPECT_EQ(LinkPiecesSent(*a_), 5u);
  EXPECT_EQ(b_->service().links().links(), 1u);
}

TEST_F(CollectiveRunnerTwoServersTest, ThreeServersDirectSumInRankOrderInOneStep) {
  a_ = StartServer(true);
  b_ = StartServer(true);
  std::unique_ptr<RpcServer> c = StartServer(true);
  ASSERT_NE(a_, nullptr);
  ASSERT_NE(b_, nullptr);
  ASSERT_NE(c, nullptr);
  for (uint64_t n = 1; n <= 3; ++n) {
    AllReduceOn({a_.get(), b_.get(), c.get()}, n, pb::AllReduce::DIRECT);
  }
  // Each server sent its vector to both others, every time over a link.
  EXPECT_EQ(LinkPiecesSent(*a_), 6u);
  EXPECT_EQ(LinkPiecesSent(*b_), 6u);
  EXPECT_EQ(LinkPiecesSent(*c), 6u);
  // The same through the streams: a third server without links (new buffers and grants, as
  // the ranks' servers change).
  for (auto& b : buffers_) b.reset();
  std::unique_ptr<RpcServer> d = StartServer(false);
  ASSERT_NE(d, nullptr);
  AllReduceOn({a_.get(), d.get(), b_.get()}, 4, pb::AllReduce::DIRECT);
}

TEST_F(CollectiveRunnerTwoServersTest, APeerWithoutLinksGetsTheStreamWithTheSameSums) {
  ThreeCollectives(true, false);
  EXPECT_EQ(LinkPiecesSent(*a_), 0u);
  EXPECT_EQ(LinkPiecesSent(*b_), 0u);
  EXPECT_EQ(a_->service().links().links(), 0u);
}

}  // namespace
}  // namespace tg::server
