// Tests of the gRPC service through a real server on a loopback port, started in-process:
// Hello, Session, Upload/Download with the cache, PeerCopy between two servers, auth,
// limits, oversized messages, concurrency, and metrics. After every error case the same
// server must still compute a MUL_MAT + ADD graph correctly on a fresh session.
#include "server/service.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/op.h"
#include "gtest/gtest.h"
#include "proto/cache_proof.h"
#include "proto/content_hash.h"
#include "proto/protocol.h"
#include "server/log_capture.h"
#include "server/metrics.h"
#include "server/rpc_server.h"
#include "server/server_testing.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;
using testing::AllocRequest;
using testing::FreeRequest;
using testing::MatMulAdd;
using testing::ReadRequest;
using testing::WriteRequest;

// One Session stream from the client side.
class SessionStream {
 public:
  SessionStream(pb::TensorGrid::Stub* stub, const std::string& token) {
    if (!token.empty()) ctx_.AddMetadata("authorization", "Bearer " + token);
    rw_ = stub->Session(&ctx_);
    pb::SessionReply started;
    if (rw_->Read(&started) && started.has_started()) id_ = started.started().session_id();
  }
  ~SessionStream() {
    if (!closed_) Close();
  }
  bool ok() const { return !id_.empty(); }
  const std::string& id() const { return id_; }
  pb::SessionReply Call(const pb::SessionRequest& r) {
    pb::SessionReply reply;
    if (!rw_->Write(r) || !rw_->Read(&reply)) {
      reply.set_code(-1);
      reply.set_message("stream broken");
    }
    return reply;
  }
  grpc::Status Close() {
    closed_ = true;
    rw_->WritesDone();
    pb::SessionReply ignored;
    while (rw_->Read(&ignored)) {
    }
    return rw_->Finish();
  }
  // Writes without waiting for a reply (for the oversized message).
  bool WriteOnly(const pb::SessionRequest& r) { return rw_->Write(r); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::SessionRequest, pb::SessionReply>> rw_;
  std::string id_;
  bool closed_ = false;
};

std::unique_ptr<pb::TensorGrid::Stub> Connect(const std::string& address, int max_send = -1) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(rpc::kMaxMessageBytes));
  args.SetMaxSendMessageSize(max_send);
  return pb::TensorGrid::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

// The SHA-256 of `data`, as an UploadHeader carries it.
std::string Sha256Bytes(const std::string& data) {
  const rpc::Sha256Digest d = rpc::Sha256(data.data(), data.size());
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// Uploads `data` into [offset, +size) of a buffer; returns the final status and replies.
struct UploadResult {
  grpc::Status status;
  bool have_it = false;
  uint64_t received = 0;
};
UploadResult Upload(pb::TensorGrid::Stub* stub, const std::string& token,
                    const std::string& session, uint64_t buffer, uint64_t offset,
                    const std::string& data, bool with_sha, size_t chunk = rpc::kChunkBytes,
                    uint64_t announced = UINT64_MAX, std::string sha = "",
                    std::optional<std::string> proof_session = std::nullopt) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto rw = stub->Upload(&ctx);
  pb::UploadMessage m;
  pb::UploadHeader* h = m.mutable_header();
  h->set_session_id(session);
  h->set_buffer(buffer);
  h->set_offset(offset);
  h->set_size(announced == UINT64_MAX ? data.size() : announced);
  if (with_sha) h->set_sha256(sha.empty() ? Sha256Bytes(data) : sha);
  // As an honest client: the proof that it holds the bytes, salted with its session's id
  // (or with `proof_session`'s, as a client replaying another session's proof would).
  if (with_sha) {
    const rpc::Sha256Digest proof =
        *rpc::CacheProof(proof_session.value_or(session), data.data(), data.size());
    h->set_cache_proof(proof.data(), proof.size());
  }
  UploadResult result;
  pb::UploadReply reply;
  if (rw->Write(m) && rw->Read(&reply)) {
    result.have_it = reply.have_it();
    if (reply.send()) {
      for (size_t off = 0; off < data.size(); off += chunk) {
        pb::UploadMessage c;
        c.set_chunk(data.substr(off, chunk));
        if (!rw->Write(c)) break;
      }
      rw->WritesDone();
      if (rw->Read(&reply)) result.received = reply.received();
    } else {
      result.received = reply.received();
      rw->WritesDone();
    }
  }
  result.status = rw->Finish();
  return result;
}

// A FillPieces header for `data` at [offset, +size) of a buffer (its SHA-256 unless `sha`),
// with the proof of possession salted with `proof_session` when given (an honest client's,
// with its own session id).
pb::UploadHeader Piece(uint64_t buffer, uint64_t offset, const std::string& data,
                       std::string sha = "", const std::string& proof_session = "") {
  pb::UploadHeader h;
  h.set_buffer(buffer);
  h.set_offset(offset);
  h.set_size(data.size());
  h.set_sha256(sha.empty() ? Sha256Bytes(data) : sha);
  if (!proof_session.empty()) {
    const rpc::Sha256Digest proof = *rpc::CacheProof(proof_session, data.data(), data.size());
    h.set_cache_proof(proof.data(), proof.size());
  }
  return h;
}

grpc::Status FillPieces(pb::TensorGrid::Stub* stub, const std::string& token,
                        const std::string& session, const std::vector<pb::UploadHeader>& pieces,
                        pb::FillPiecesReply* reply) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  pb::FillPiecesRequest request;
  request.set_session_id(session);
  for (const pb::UploadHeader& p : pieces) *request.add_pieces() = p;
  return stub->FillPieces(&ctx, request, reply);
}

std::string Download(pb::TensorGrid::Stub* stub, const std::string& token,
                     const std::string& session, uint64_t buffer, uint64_t offset, uint64_t size,
                     grpc::Status* status) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  pb::DownloadRequest req;
  req.set_session_id(session);
  req.mutable_range()->set_buffer(buffer);
  req.mutable_range()->set_offset(offset);
  req.mutable_range()->set_size(size);
  auto reader = stub->Download(&ctx, req);
  std::string out;
  pb::DataChunk chunk;
  while (reader->Read(&chunk)) {
    EXPECT_LE(chunk.data().size(), rpc::kChunkBytes);
    out += chunk.data();
  }
  *status = reader->Finish();
  return out;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed;
  for (char& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = testing::TwoCpuDevices();
    ASSERT_EQ(devices_.size(), 2u);
    cache_dir_ =
        std::filesystem::temp_directory_path() / ("tg_service_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(cache_dir_);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(cache_dir_);
  }

  void StartServer(ServerConfig config = {}) {
    config.port = 0;
    config.devices = devices_;
    if (config.cache_dir.empty()) config.cache_dir = cache_dir_.string();
    config.metrics_port = 0;
    token_ = config.auth_token;
    auto s = RpcServer::Start(config);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = Connect(server_->address());
  }

  // Calls Hello with `request`, sending `token` as the bearer token unless it is empty.
  grpc::Status Hello(const pb::HelloRequest& request, const std::string& token = "") {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    pb::HelloReply reply;
    return stub_->Hello(&ctx, request, &reply);
  }

  // The server still serves a valid compute on a fresh session.
  void ExpectHealthy(uint32_t seed = 21) {
    SessionStream s(stub_.get(), token_);
    ASSERT_TRUE(s.ok());
    absl::Status st =
        testing::RunMatMulAddCheck([&](const pb::SessionRequest& r) { return s.Call(r); }, seed, 1);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_TRUE(s.Close().ok());
  }

  // A second server on the same devices, for peer copies.
  absl::StatusOr<std::unique_ptr<RpcServer>> StartPeerServer(int port = 0) {
    ServerConfig config;
    config.port = port;
    config.devices = devices_;
    return RpcServer::Start(config);
  }

  // This server and a peer, with a session on each: `src` on the peer, `dst` here.
  struct PeerPair {
    std::unique_ptr<RpcServer> peer;
    std::unique_ptr<pb::TensorGrid::Stub> peer_stub;
    std::unique_ptr<SessionStream> src;
    std::unique_ptr<SessionStream> dst;
  };
  PeerPair StartWithPeer() {
    StartServer();
    PeerPair p;
    auto peer = StartPeerServer();
    EXPECT_TRUE(peer.ok()) << peer.status();
    if (!peer.ok()) return p;
    p.peer = std::move(*peer);
    p.peer_stub = Connect(p.peer->address());
    p.src = std::make_unique<SessionStream>(p.peer_stub.get(), "");
    p.dst = std::make_unique<SessionStream>(stub_.get(), "");
    return p;
  }

  std::vector<Device*> devices_;
  std::filesystem::path cache_dir_;
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<pb::TensorGrid::Stub> stub_;
  std::string token_;
};

pb::HelloRequest GoodHello() {
  pb::HelloRequest h;
  h.set_protocol_version(rpc::kProtocolVersion);
  h.set_op_table_fingerprint(OpTableFingerprint());
  h.set_client_name("service_test");
  return h;
}

TEST_F(ServiceTest, HelloListsDevices) {
  StartServer();
  grpc::ClientContext ctx;
  pb::HelloReply reply;
  ASSERT_TRUE(stub_->Hello(&ctx, GoodHello(), &reply).ok());
  EXPECT_EQ(reply.protocol_version(), rpc::kProtocolVersion);
  EXPECT_EQ(reply.op_table_fingerprint(), OpTableFingerprint());
  EXPECT_EQ(reply.server_id().size(), 32u);
  EXPECT_EQ(reply.max_message_bytes(), rpc::kMaxMessageBytes);
  EXPECT_EQ(reply.max_inline_bytes(), rpc::kMaxInlineBytes);
  ASSERT_EQ(reply.devices_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const pb::DeviceInfo& d = reply.devices(i);
    EXPECT_EQ(d.index(), static_cast<uint32_t>(i));
    EXPECT_EQ(d.name(), absl::StrCat("CPU", i));
    EXPECT_EQ(d.type(), "CPU");
    EXPECT_GT(d.memory_total(), 0u);
    EXPECT_TRUE(d.buffer_type().is_host());
    EXPECT_EQ(d.buffer_type().alignment(), 64u);
    EXPECT_EQ(d.supported_ops_size(), static_cast<int>(Op::kCount) - 1);
  }
}

TEST_F(ServiceTest, HelloVersionOrFingerprintMismatch) {
  StartServer();
  {
    pb::HelloRequest h = GoodHello();
    h.set_protocol_version(rpc::kProtocolVersion + 1);
    grpc::Status st = Hello(h);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(st.error_message().find(absl::StrCat("version ", rpc::kProtocolVersion + 1)),
              std::string::npos);
    EXPECT_NE(st.error_message().find(absl::StrCat("version ", rpc::kProtocolVersion)),
              std::string::npos);
  }
  {
    pb::HelloRequest h = GoodHello();
    h.set_op_table_fingerprint(0x1234);
    grpc::Status st = Hello(h);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(st.error_message().find("0000000000001234"), std::string::npos);
    EXPECT_NE(st.error_message().find(absl::StrFormat("%016x", OpTableFingerprint())),
              std::string::npos);
  }
  ExpectHealthy();
}

TEST_F(ServiceTest, SessionErrorsKeepTheStreamAndServerAlive) {
  StartServer();
  SessionStream s(stub_.get(), "");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.id().size(), 32u);
  EXPECT_EQ(s.Call(ReadRequest(1, 12345, 0, 4)).code(),
            static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(s.Call(AllocRequest(2, 0, uint64_t{1} << 60)).code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  absl::Status st =
      testing::RunMatMulAddCheck([&](const pb::SessionRequest& r) { return s.Call(r); }, 3);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(s.Close().ok());
  ExpectHealthy();
}

TEST_F(ServiceTest, AnotherSessionsHandleIsNotFound) {
  StartServer();
  SessionStream a(stub_.get(), "");
  SessionStream b(stub_.get(), "");
  const uint64_t h = a.Call(AllocRequest(1, 0, 64)).alloc_buffer().buffer();
  EXPECT_EQ(b.Call(ReadRequest(1, h, 0, 4)).code(), static_cast<int>(absl::StatusCode::kNotFound));
  grpc::Status dst;
  Download(stub_.get(), "", b.id(), h, 0, 4, &dst);  // b's id, a's handle.
  EXPECT_EQ(dst.error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectHealthy();
}

TEST_F(ServiceTest, UploadDownloadAndCache) {
  StartServer();
  SessionStream s(stub_.get(), "");
  const size_t n = 10 << 20;  // more than two chunks.
  const uint64_t h = s.Call(AllocRequest(1, 0, n + 100)).alloc_buffer().buffer();
  const std::string data = RandomBytes(n, 1);
  UploadResult up = Upload(stub_.get(), "", s.id(), h, 100, data, /*with_sha=*/true);
  ASSERT_TRUE(up.status.ok()) << up.status.error_message();
  EXPECT_FALSE(up.have_it);
  EXPECT_EQ(up.received, n);
  grpc::Status st;
  EXPECT_EQ(Download(stub_.get(), "", s.id(), h, 100, n, &st), data);
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(server_->metrics().upload_bytes(), n);
  // The same bytes again (into another buffer): served from the cache.
  const uint64_t h2 = s.Call(AllocRequest(2, 1, n)).alloc_buffer().buffer();
  up = Upload(stub_.get(), "", s.id(), h2, 0, data, true);
  ASSERT_TRUE(up.status.ok()) << up.status.error_message();
  EXPECT_TRUE(up.have_it);
  EXPECT_EQ(Download(stub_.get(), "", s.id(), h2, 0, n, &st), data);
  EXPECT_EQ(server_->metrics().cache_hit_bytes(), n);
  pb::SessionRequest stats;
  stats.set_id(3);
  stats.mutable_cache_stats();
  pb::SessionReply r = s.Call(stats);
  EXPECT_EQ(r.cache_stats().uploaded_bytes(), n);
  EXPECT_EQ(r.cache_stats().cache_hit_bytes(), n);
  // Without a hash: always sent, never cached.
  up = Upload(stub_.get(), "", s.id(), h2, 0, "abc", false);
  EXPECT_TRUE(up.status.ok());
  EXPECT_FALSE(up.have_it);
  EXPECT_EQ(s.Call(ReadRequest(4, h2, 0, 3)).read().data(), "abc");
}

TEST_F(ServiceTest, UploadErrors) {
  StartServer();
  SessionStream s(stub_.get(), "");
  const uint64_t h = s.Call(AllocRequest(1, 0, 1024)).alloc_buffer().buffer();
  const std::string data = RandomBytes(512, 2);
  EXPECT_EQ(Upload(stub_.get(), "", "nosuchsession", h, 0, data, false).status.error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Upload(stub_.get(), "", s.id(), h + 1, 0, data, false).status.error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Upload(stub_.get(), "", s.id(), h, 600, data, false).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // range outside the buffer.
  EXPECT_EQ(Upload(stub_.get(), "", s.id(), h, 0, data, false, 4096, 600).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // fewer bytes than announced.
  EXPECT_EQ(Upload(stub_.get(), "", s.id(), h, 0, data, false, 100, 300).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // more bytes than announced.
  EXPECT_EQ(
      Upload(stub_.get(), "", s.id(), h, 0, data, true, 4096, UINT64_MAX, std::string(32, 'x'))
          .status.error_code(),
      grpc::StatusCode::DATA_LOSS);  // hash mismatch.
  EXPECT_EQ(Upload(stub_.get(), "", s.id(), h, 0, data, true, 4096, UINT64_MAX, std::string(5, 'x'))
                .status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // not a sha256.
  {                                               // a chunk before the header.
    grpc::ClientContext ctx;
    auto rw = stub_->Upload(&ctx);
    pb::UploadMessage m;
    m.set_chunk("zzz");
    rw->Write(m);
    rw->WritesDone();
    EXPECT_EQ(rw->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  grpc::Status st;
  Download(stub_.get(), "", s.id(), h, 1000, 100, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.Call(ReadRequest(2, h, 0, 4)).code(), 0);
  ExpectHealthy();
}

// FillPieces fills, in one call, each piece the cache has (the bytes land as an Upload's
// would, and count as cache hits) and answers `send` for the others, which it leaves alone
// (a never-written range reads as zeros).
TEST_F(ServiceTest, FillPiecesFillsWhatTheCacheHasAndNothingElse) {
  StartServer();
  SessionStream s(stub_.get(), "");
  const size_t n = 5 << 20;
  const std::string a = RandomBytes(n, 3), b = RandomBytes(n, 4);
  const uint64_t h = s.Call(AllocRequest(1, 0, 3 * n)).alloc_buffer().buffer();
  ASSERT_TRUE(Upload(stub_.get(), "", s.id(), h, 0, a, true).status.ok());  // now cached.
  pb::FillPiecesReply reply;
  ASSERT_TRUE(FillPieces(stub_.get(), "", s.id(),
                         {Piece(h, 2 * n, a, "", s.id()), Piece(h, n, b, "", s.id())}, &reply)
                  .ok());
  ASSERT_EQ(reply.results_size(), 2);
  EXPECT_TRUE(reply.results(0).have_it());
  EXPECT_EQ(reply.results(0).source(), pb::UPLOAD_SOURCE_CACHE);
  EXPECT_EQ(reply.results(0).received(), n);
  EXPECT_FALSE(reply.results(1).have_it());
  EXPECT_TRUE(reply.results(1).send());
  grpc::Status st;
  EXPECT_TRUE(Download(stub_.get(), "", s.id(), h, 2 * n, n, &st) == a);
  EXPECT_TRUE(Download(stub_.get(), "", s.id(), h, n, n, &st) == std::string(n, '\0'));
  EXPECT_EQ(server_->metrics().cache_hit_bytes(), n);
  EXPECT_EQ(server_->metrics().upload_calls(Metrics::UploadCall::kFillPieces), 1);
  EXPECT_EQ(server_->metrics().upload_calls(Metrics::UploadCall::kUpload), 1);
}

// Knowing a piece's hash is not holding its bytes: another session (another tenant) that
// names cached bytes by their SHA-256 alone, or with a proof made for another session, gets
// `send`, and its buffer never holds the cached bytes, not even a range it wrote before. With
// the proof (only a holder of the bytes can make it) the bytes come from the cache.
TEST_F(ServiceTest, CacheHitNeedsProofOfPossession) {
  StartServer();
  SessionStream owner(stub_.get(), "");
  SessionStream other(stub_.get(), "");
  const size_t n = 1 << 20;
  const std::string secret = RandomBytes(n, 11);
  const uint64_t ho = owner.Call(AllocRequest(1, 0, n)).alloc_buffer().buffer();
  ASSERT_TRUE(Upload(stub_.get(), "", owner.id(), ho, 0, secret, true).status.ok());  // cached.
  const uint64_t h = other.Call(AllocRequest(1, 0, 2 * n)).alloc_buffer().buffer();
  const std::string mine(n, 'm');
  ASSERT_TRUE(Upload(stub_.get(), "", other.id(), h, n, mine, false).status.ok());
  // FillPieces: no proof, a proof for the owner's session (replayed), a proof of other bytes.
  for (const pb::UploadHeader& piece :
       {Piece(h, 0, secret), Piece(h, n, secret, "", owner.id()), [&] {
          pb::UploadHeader p = Piece(h, 0, secret);
          const rpc::Sha256Digest wrong = *rpc::CacheProof(other.id(), mine.data(), mine.size());
          p.set_cache_proof(wrong.data(), wrong.size());
          return p;
        }()}) {
    pb::FillPiecesReply reply;
    ASSERT_TRUE(FillPieces(stub_.get(), "", other.id(), {piece}, &reply).ok());
    ASSERT_EQ(reply.results_size(), 1);
    EXPECT_FALSE(reply.results(0).have_it());
    EXPECT_TRUE(reply.results(0).send());
  }
  // Upload with the hash alone, then nothing sent: the stream ends short, nothing filled.
  UploadResult up = Upload(stub_.get(), "", other.id(), h, n, secret, true, rpc::kChunkBytes,
                           UINT64_MAX, "", owner.id());
  EXPECT_FALSE(up.have_it);  // it had to send the bytes (it had them here, so that is fine).
  grpc::Status st;
  const std::string zeros(n, '\0');
  EXPECT_TRUE(Download(stub_.get(), "", other.id(), h, 0, n, &st) == zeros);
  EXPECT_EQ(server_->metrics().cache_hit_bytes(), 0);
  // The honest way: a proof salted with its own session.
  const uint64_t h2 = other.Call(AllocRequest(2, 0, n)).alloc_buffer().buffer();
  pb::FillPiecesReply reply;
  ASSERT_TRUE(
      FillPieces(stub_.get(), "", other.id(), {Piece(h2, 0, secret, "", other.id())}, &reply).ok());
  ASSERT_EQ(reply.results_size(), 1);
  EXPECT_TRUE(reply.results(0).have_it());
  EXPECT_TRUE(Download(stub_.get(), "", other.id(), h2, 0, n, &st) == secret);
  EXPECT_EQ(server_->metrics().cache_hit_bytes(), n);
}

// A range already written keeps its bytes when a fill is refused for a wrong proof: the
// cached bytes are checked in private memory and never reach the buffer.
TEST_F(ServiceTest, RefusedCacheFillLeavesAWrittenRangeAlone) {
  StartServer();
  SessionStream owner(stub_.get(), "");
  SessionStream other(stub_.get(), "");
  const size_t n = 64 << 10;
  const std::string secret = RandomBytes(n, 12);
  const uint64_t ho = owner.Call(AllocRequest(1, 0, n)).alloc_buffer().buffer();
  ASSERT_TRUE(Upload(stub_.get(), "", owner.id(), ho, 0, secret, true).status.ok());
  const uint64_t h = other.Call(AllocRequest(1, 0, n)).alloc_buffer().buffer();
  const std::string mine(n, 'm');
  ASSERT_TRUE(Upload(stub_.get(), "", other.id(), h, 0, mine, false).status.ok());
  pb::FillPiecesReply reply;
  ASSERT_TRUE(
      FillPieces(stub_.get(), "", other.id(), {Piece(h, 0, secret, "", owner.id())}, &reply).ok());
  EXPECT_FALSE(reply.results(0).have_it());
  grpc::Status st;
  EXPECT_TRUE(Download(stub_.get(), "", other.id(), h, 0, n, &st) == mine);
}

// One FillPieces names each byte of a buffer once: a piece named twice (a 14 KB call naming
// one 16 MiB piece 256 times made the server copy 4 GiB), or overlapping another, is refused
// naming it, before anything is filled; and the call fills at most rpc::kMaxFillBytes.
TEST_F(ServiceTest, FillPiecesRefusesOverlapsAndTooManyBytes) {
  StartServer();
  SessionStream s(stub_.get(), "");
  const size_t n = 64 << 10;
  const std::string a = RandomBytes(n, 13), b = RandomBytes(n, 14);
  const uint64_t h = s.Call(AllocRequest(1, 0, 4 * n)).alloc_buffer().buffer();
  const uint64_t h2 = s.Call(AllocRequest(2, 0, 4 * n)).alloc_buffer().buffer();
  ASSERT_TRUE(Upload(stub_.get(), "", s.id(), h, 0, a, true).status.ok());  // cached.
  const double hits_before = server_->metrics().cache_hit_bytes();
  pb::FillPiecesReply reply;
  grpc::Status st = FillPieces(
      stub_.get(), "", s.id(),
      {Piece(h, n, a, "", s.id()), Piece(h, 2 * n, b, "", s.id()), Piece(h, n, a, "", s.id())},
      &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "piece 2 overlaps piece 0"))
      << st.error_message();
  // Another hash into an overlapping range.
  st = FillPieces(stub_.get(), "", s.id(),
                  {Piece(h, n, a, "", s.id()), Piece(h, n + n / 2, b, "", s.id())}, &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "piece 1 overlaps piece 0"))
      << st.error_message();
  EXPECT_EQ(server_->metrics().cache_hit_bytes(), hits_before);  // nothing filled.
  // More bytes than one call may fill (refused before the ranges are even looked at).
  pb::UploadHeader big = Piece(h, 0, a, "", s.id());
  big.set_size(rpc::kMaxFillBytes / 2 + 1);
  pb::UploadHeader big2 = big;
  big2.set_offset(rpc::kMaxFillBytes);
  st = FillPieces(stub_.get(), "", s.id(), {big, big2}, &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "piece 1 of")) << st.error_message();
  // The same hash into ranges that do not overlap, and the same range of another buffer: fine.
  st = FillPieces(
      stub_.get(), "", s.id(),
      {Piece(h, n, a, "", s.id()), Piece(h, 2 * n, a, "", s.id()), Piece(h2, n, a, "", s.id())},
      &reply);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(reply.results_size(), 3);
  for (const pb::UploadReply& r : reply.results()) EXPECT_TRUE(r.have_it());
  ExpectHealthy();
}

TEST_F(ServiceTest, FillPiecesErrors) {
  ServerConfig config;
  config.auth_token = "tok";
  StartServer(config);
  SessionStream s(stub_.get(), token_);
  ASSERT_TRUE(s.ok());
  const uint64_t h = s.Call(AllocRequest(1, 0, 1024)).alloc_buffer().buffer();
  const std::string data = RandomBytes(512, 5);
  pb::FillPiecesReply reply;
  EXPECT_EQ(FillPieces(stub_.get(), "", s.id(), {Piece(h, 0, data)}, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(
      FillPieces(stub_.get(), token_, "nosuchsession", {Piece(h, 0, data)}, &reply).error_code(),
      grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(FillPieces(stub_.get(), token_, s.id(), {Piece(h + 1, 0, data)}, &reply).error_code(),
            grpc::StatusCode::NOT_FOUND);  // no such buffer.
  EXPECT_EQ(FillPieces(stub_.get(), token_, s.id(), {Piece(h, 600, data)}, &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // range outside the buffer.
  EXPECT_EQ(
      FillPieces(stub_.get(), token_, s.id(), {Piece(h, 0, data, std::string(5, 'x'))}, &reply)
          .error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);  // not a sha256.
  pb::UploadHeader unhashed = Piece(h, 0, data);
  unhashed.clear_sha256();
  grpc::Status st = FillPieces(stub_.get(), token_, s.id(), {unhashed}, &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "piece 0 has no sha256")) << st.error_message();
  std::vector<pb::UploadHeader> many(rpc::kMaxFillPieces + 1, Piece(h, 0, data));
  st = FillPieces(stub_.get(), token_, s.id(), many, &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "several calls")) << st.error_message();
  ExpectHealthy();
}

TEST_F(ServiceTest, FreeWhileUploadingIsSafe) {
  StartServer();
  {
    SessionStream s(stub_.get(), "");
    const uint64_t h = s.Call(AllocRequest(1, 0, 1 << 20)).alloc_buffer().buffer();
    grpc::ClientContext ctx;
    auto rw = stub_->Upload(&ctx);
    pb::UploadMessage m;
    m.mutable_header()->set_session_id(s.id());
    m.mutable_header()->set_buffer(h);
    m.mutable_header()->set_size(1 << 20);
    ASSERT_TRUE(rw->Write(m));
    pb::UploadReply reply;
    ASSERT_TRUE(rw->Read(&reply));
    ASSERT_TRUE(reply.send());
    pb::UploadMessage c;
    c.set_chunk(std::string(1 << 19, 'a'));
    ASSERT_TRUE(rw->Write(c));
    EXPECT_EQ(s.Call(FreeRequest(2, h)).code(), 0);  // freed mid-upload: the memory goes now,
    // or once the chunk being copied at that moment is in (milliseconds), not at the end.
    for (int i = 0; i < 100 && server_->metrics().buffers() != 0; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(server_->metrics().buffers(), 0);
    EXPECT_TRUE(s.Close().ok());  // and the session ends, which cancels its uploads.
    rw->Write(c);
    rw->WritesDone();
    rw->Read(&reply);
    const grpc::Status st = rw->Finish();
    EXPECT_TRUE(st.error_code() == grpc::StatusCode::CANCELLED ||
                st.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
        << st.error_code() << " " << st.error_message();
  }
  EXPECT_EQ(server_->metrics().buffers(), 0);
  EXPECT_EQ(server_->metrics().buffer_bytes(), 0);
  ExpectHealthy();
}

TEST_F(ServiceTest, OversizedMessageIsRejected) {
  StartServer();
  auto big_stub = Connect(server_->address(), 128 << 20);
  {
    SessionStream s(big_stub.get(), "");
    ASSERT_TRUE(s.ok());
    s.WriteOnly(WriteRequest(1, 1, 0, std::string(rpc::kMaxMessageBytes + 1024, 'x')));
    grpc::Status st = s.Close();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }
  ExpectHealthy();
}

TEST_F(ServiceTest, BearerToken) {
  ServerConfig config;
  config.auth_token = "s3cret-token";
  StartServer(config);
  grpc::Status hello = Hello(GoodHello());
  EXPECT_EQ(hello.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(hello.error_message().find("missing"), std::string::npos);
  hello = Hello(GoodHello(), "wrong");
  EXPECT_EQ(hello.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(hello.error_message().find("wrong"), std::string::npos);
  EXPECT_TRUE(Hello(GoodHello(), "s3cret-token").ok());
  {  // a session stream without the token.
    SessionStream s(stub_.get(), "");
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.Close().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    SessionStream s(stub_.get(), "nope");
    EXPECT_EQ(s.Close().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // Upload/Download need it too, and so do the peer calls (a peer sends its own server's).
  SessionStream s(stub_.get(), token_);
  ASSERT_TRUE(s.ok());
  const uint64_t h = s.Call(AllocRequest(1, 0, 64)).alloc_buffer().buffer();
  EXPECT_EQ(Upload(stub_.get(), "", s.id(), h, 0, "abcd", false).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Upload(stub_.get(), token_, s.id(), h, 0, "abcd", false).status.ok());
  grpc::Status st;
  Download(stub_.get(), "x", s.id(), h, 0, 4, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  pb::SessionRequest g;
  g.set_id(2);
  g.mutable_grant_peer_read()->set_buffer(h);
  const std::string grant = s.Call(g).grant().grant();
  pb::PeerCopyRequest pc;
  pc.set_grant(grant);
  pc.set_size(4);
  auto peer_copy = [&](const std::string& token, std::string* got) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    auto reader = stub_->PeerCopy(&ctx, pc);
    pb::DataChunk chunk;
    while (reader->Read(&chunk)) *got += chunk.data();
    return reader->Finish();
  };
  std::string got;
  grpc::Status copied = peer_copy("", &got);
  EXPECT_EQ(copied.error_code(), grpc::StatusCode::UNAUTHENTICATED) << copied.error_message();
  EXPECT_EQ(got, "");
  copied = peer_copy(token_, &got);
  EXPECT_TRUE(copied.ok()) << copied.error_message();
  EXPECT_EQ(got, "abcd");
  for (const std::string& token : {std::string(), std::string("wrong")}) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    pb::PeerDeliverRequest deliver;
    pb::DeliveredPiece* piece = deliver.add_pieces();
    piece->set_grant(grant);
    piece->set_data("wxyz");
    pb::PeerDeliverReply reply;
    const grpc::Status st = stub_->PeerDeliver(&ctx, deliver, &reply);
    EXPECT_EQ(st.error_code(), token.empty() ? grpc::StatusCode::UNAUTHENTICATED
                                             : grpc::StatusCode::PERMISSION_DENIED)
        << st.error_message();
    EXPECT_NE(st.error_message().find("peer_deliver"), std::string::npos) << st.error_message();
  }
  ExpectHealthy();
}

TEST_F(ServiceTest, SessionsAndRefusalsAreLogged) {
  testing::LogCapture log;
  ServerConfig config;
  config.auth_token = "secret";
  StartServer(config);
  std::string id;
  {
    SessionStream s(stub_.get(), token_);
    ASSERT_TRUE(s.ok());
    id = s.id();
    ASSERT_EQ(s.Call(AllocRequest(1, 0, 64)).code(), 0);
    EXPECT_TRUE(s.Close().ok());
  }
  {
    SessionStream s(stub_.get(), "nope");
    EXPECT_EQ(s.Close().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  SetLogLevel(LogLevel::kWarn);  // drops the info lines of the next session.
  {
    SessionStream s(stub_.get(), token_);
    ASSERT_TRUE(s.ok());
  }
  const std::string text = log.Text();
  EXPECT_EQ(text.find(id), std::string::npos) << "a whole session id leaked: " << text;
  const std::string opened =
      absl::StrCat("rpc-server: session opened id=", id.substr(0, 8), " peer=127.0.0.1:");
  std::vector<std::string> seen;
  for (const std::string& line : log.Lines()) {
    if (absl::StartsWith(line, opened) && absl::EndsWith(line, " sessions=1")) {
      seen.push_back("opened");
    } else if (line == absl::StrCat("rpc-server: session closed id=", id.substr(0, 8),
                                    " buffers=1 bytes_held=", kMinBufferCharge,
                                    " sessions=0")) {  // a 64-byte buffer's charge.
      seen.push_back("closed");
    } else if (absl::StartsWith(line, "rpc-server: warn: call refused peer=127.0.0.1:") &&
               absl::EndsWith(line, " error=\"wrong bearer token\"")) {
      seen.push_back("refused");
    } else if (absl::StrContains(line, "session")) {
      seen.push_back(line);
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"opened", "closed", "refused"})) << text;
}

TEST_F(ServiceTest, MaxSessions) {
  ServerConfig config;
  config.max_sessions = 2;
  StartServer(config);
  auto a = std::make_unique<SessionStream>(stub_.get(), "");
  SessionStream b(stub_.get(), "");
  ASSERT_TRUE(a->ok() && b.ok());
  {
    SessionStream c(stub_.get(), "");
    EXPECT_FALSE(c.ok());
    grpc::Status st = c.Close();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(st.error_message().find("max-sessions"), std::string::npos);
  }
  EXPECT_TRUE(a->Close().ok());
  a.reset();
  ExpectHealthy();  // a slot is free again.
}

TEST_F(ServiceTest, SessionMemoryLimit) {
  ServerConfig config;
  config.session_mem_limit = 1 << 20;
  StartServer(config);
  SessionStream s(stub_.get(), "");
  EXPECT_EQ(s.Call(AllocRequest(1, 0, 1 << 19)).code(), 0);
  pb::SessionReply r = s.Call(AllocRequest(2, 0, 1 << 20));
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(r.message().find("1048576"), std::string::npos) << r.message();
  ExpectHealthy();
}

// --client-mem-limit: two sessions of one client (its own token) share one limit, and a
// second client, or the same one after its sessions closed, still has all of its own.
TEST_F(ServiceTest, ClientMemoryLimitSpansTheClientsSessions) {
  ServerConfig config;
  config.client_tokens = {{"alice", "alice-token-0123456789"}, {"bob", "bob-token-0123456789"}};
  config.client_mem_limit = 1 << 20;
  StartServer(config);
  {
    SessionStream a1(stub_.get(), "alice-token-0123456789");
    SessionStream a2(stub_.get(), "alice-token-0123456789");
    SessionStream b(stub_.get(), "bob-token-0123456789");
    ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
    EXPECT_EQ(a1.Call(AllocRequest(1, 0, 600 << 10)).code(), 0);
    // Within alice's session, not within what her sessions hold together.
    pb::SessionReply r = a2.Call(AllocRequest(1, 0, 600 << 10));
    EXPECT_EQ(r.code(), testing::kExhausted);
    EXPECT_NE(r.message().find("client alice"), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("--client-mem-limit"), std::string::npos) << r.message();
    EXPECT_NE(r.message().find(absl::StrCat(600 << 10, " bytes, ", 600 << 10, " asked")),
              std::string::npos)
        << r.message();
    EXPECT_EQ(a2.Call(AllocRequest(2, 0, 300 << 10)).code(), 0);  // what is left.
    EXPECT_EQ(b.Call(AllocRequest(1, 0, 900 << 10)).code(), 0);   // bob's own share.
    EXPECT_TRUE(a1.Close().ok());
    // a1's bytes went back to alice with its close.
    EXPECT_EQ(a2.Call(AllocRequest(3, 0, 600 << 10)).code(), 0);
  }
  SessionStream again(stub_.get(), "alice-token-0123456789");
  EXPECT_EQ(again.Call(AllocRequest(1, 0, 1000 << 10)).code(), 0);
  token_ = "bob-token-0123456789";  // the server takes client tokens only.
  ExpectHealthy();
}

TEST_F(ServiceTest, ClientMaxSessionsAndTokens) {
  ServerConfig config;
  config.auth_token = "cluster-token";
  config.client_tokens = {{"alice", "alice-token-0123456789"}};
  config.client_max_sessions = 2;
  StartServer(config);
  SessionStream a1(stub_.get(), "alice-token-0123456789");
  SessionStream a2(stub_.get(), "alice-token-0123456789");
  ASSERT_TRUE(a1.ok() && a2.ok());
  {
    SessionStream a3(stub_.get(), "alice-token-0123456789");
    EXPECT_FALSE(a3.ok());
    const grpc::Status st = a3.Close();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(st.error_message().find("client alice has 2 sessions open"), std::string::npos)
        << st.error_message();
    EXPECT_NE(st.error_message().find("--client-max-sessions 2"), std::string::npos);
  }
  // Another client (the cluster token's caller, known by its address) is not alice.
  SessionStream other(stub_.get(), "cluster-token");
  EXPECT_TRUE(other.ok());
  // A token that is neither is refused.
  SessionStream wrong(stub_.get(), "nobody-token-0123456789");
  EXPECT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.Close().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // A closed session gives its slot back to its client.
  EXPECT_TRUE(a1.Close().ok());
  SessionStream a4(stub_.get(), "alice-token-0123456789");
  EXPECT_TRUE(a4.ok());
  // A client token is no peer credential.
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer alice-token-0123456789");
  std::unique_ptr<grpc::ClientReader<pb::DataChunk>> copy =
      stub_->PeerCopy(&ctx, pb::PeerCopyRequest());
  pb::DataChunk chunk;
  while (copy->Read(&chunk)) {
  }
  EXPECT_EQ(copy->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ServiceTest, PeerPullBetweenServers) {
  PeerPair pair = StartWithPeer();
  ASSERT_NE(pair.peer, nullptr);
  SessionStream& src = *pair.src;
  SessionStream& dst = *pair.dst;
  const std::string data = RandomBytes(5 << 20, 3);  // more than one chunk.
  const uint64_t hs = src.Call(AllocRequest(1, 0, data.size())).alloc_buffer().buffer();
  ASSERT_TRUE(Upload(pair.peer_stub.get(), "", src.id(), hs, 0, data, false).status.ok());
  pb::SessionRequest g;
  g.set_id(2);
  g.mutable_grant_peer_read()->set_buffer(hs);
  const std::string grant = src.Call(g).grant().grant();
  const uint64_t hd = dst.Call(AllocRequest(1, 1, data.size() + 10)).alloc_buffer().buffer();
  pb::SessionRequest p;
  p.set_id(2);
  pb::PeerPull* pull = p.mutable_peer_pull();
  pull->set_endpoint(pair.peer->address());
  pull->set_grant(grant);
  pull->set_src_offset(0);
  pull->set_size(data.size());
  pull->set_dst_buffer(hd);
  pull->set_dst_offset(10);
  pb::SessionReply r = dst.Call(p);
  ASSERT_EQ(r.code(), 0) << r.message();
  grpc::Status st;
  EXPECT_EQ(Download(stub_.get(), "", dst.id(), hd, 10, data.size(), &st), data);
  pull->set_dst_offset(11);  // one byte too far.
  EXPECT_EQ(dst.Call(p).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  pull->set_dst_offset(0);
  pull->set_src_offset(1);  // source range outside the granted buffer.
  EXPECT_EQ(dst.Call(p).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  pull->set_src_offset(0);
  pull->set_grant("00000000000000000000000000000000");
  EXPECT_EQ(dst.Call(p).code(), static_cast<int>(absl::StatusCode::kNotFound));
  // Freeing the source revokes the grant.
  ASSERT_EQ(src.Call(FreeRequest(3, hs)).code(), 0);
  pull->set_grant(grant);
  EXPECT_EQ(dst.Call(p).code(), static_cast<int>(absl::StatusCode::kNotFound));
  ExpectHealthy();
}

// A pull naming a command of the source session (PeerPull.after) reads what that command
// wrote, however early it arrives: the source's PeerCopy waits for it. It fails when that
// command failed, and when the source session closes first.
TEST_F(ServiceTest, PeerPullWaitsAtTheSourceForItsCommand) {
  StartServer();
  auto other = StartPeerServer();
  ASSERT_TRUE(other.ok()) << other.status();
  auto other_stub = Connect((*other)->address());
  auto src = std::make_unique<SessionStream>(other_stub.get(), "");
  SessionStream dst(stub_.get(), "");
  constexpr uint64_t kBytes = 64;
  const uint64_t hs = src->Call(AllocRequest(1, 0, kBytes)).alloc_buffer().buffer();
  pb::SessionRequest g;
  g.set_id(2);
  g.mutable_grant_peer_read()->set_buffer(hs);
  const std::string grant = src->Call(g).grant().grant();
  const uint64_t hd = dst.Call(AllocRequest(1, 1, kBytes)).alloc_buffer().buffer();
  auto pull_after = [&](uint64_t id, uint64_t after) {
    pb::SessionRequest p;
    p.set_id(id);
    pb::PeerPull* pull = p.mutable_peer_pull();
    pull->set_endpoint((*other)->address());
    pull->set_grant(grant);
    pull->set_size(kBytes);
    pull->set_dst_buffer(hd);
    pull->set_after(after);
    return p;
  };
  const std::string first(kBytes, 'a'), second(kBytes, 'b');
  std::atomic<bool> pulled{false};
  pb::SessionReply reply;
  std::thread puller([&] {
    reply = dst.Call(pull_after(2, 4));  // the source's command 4 is not even sent yet.
    pulled = true;
  });
  // Long enough for a pull that does not wait to have copied the zeros.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(pulled.load());
  ASSERT_EQ(src->Call(WriteRequest(3, hs, 0, first)).code(), 0);
  ASSERT_EQ(src->Call(WriteRequest(4, hs, 0, second)).code(), 0);
  puller.join();
  ASSERT_EQ(reply.code(), 0) << reply.message();
  grpc::Status st;
  EXPECT_EQ(Download(stub_.get(), "", dst.id(), hd, 0, kBytes, &st), second);
  // Command 5 fails (out of range): a pull after it fails too, naming it.
  EXPECT_NE(src->Call(WriteRequest(5, hs, 1, second)).code(), 0);
  reply = dst.Call(pull_after(3, 5));
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(absl::StrContains(reply.message(), "source command 5 failed")) << reply.message();
  EXPECT_EQ(reply.lost_endpoint(), "");  // no server was lost.
  // A pull waiting for a command that never comes ends when the source session does.
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    src.reset();
  });
  reply = dst.Call(pull_after(4, 100));
  closer.join();
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kAborted)) << reply.message();
  ExpectHealthy();
}

pb::SessionRequest GrantRequest(uint64_t id, uint64_t buffer) {
  pb::SessionRequest g;
  g.set_id(id);
  g.mutable_grant_peer_read()->set_buffer(buffer);
  return g;
}

// Which server is lost travels typed (SessionReply.lost_endpoint) from the server that lost
// it, and from server to server: the source's command fails because the source cannot reach
// a third server, and a pull waiting for that command, on this server, names the third one,
// not the source it pulled from (which answered: it is alive).
TEST_F(ServiceTest, APeerLostBehindThePeerPulledFromIsTheOneNamed) {
  StartServer();
  auto source = StartPeerServer();
  ASSERT_TRUE(source.ok()) << source.status();
  auto third = StartPeerServer();
  ASSERT_TRUE(third.ok()) << third.status();
  const std::string lost = (*third)->address();
  third->reset();  // gone: its port refuses.
  auto source_stub = Connect((*source)->address());
  SessionStream src(source_stub.get(), "");
  SessionStream dst(stub_.get(), "");
  constexpr uint64_t kBytes = 64;
  const uint64_t hs = src.Call(AllocRequest(1, 0, kBytes)).alloc_buffer().buffer();
  const std::string grant = src.Call(GrantRequest(2, hs)).grant().grant();
  const uint64_t hd = dst.Call(AllocRequest(1, 0, kBytes)).alloc_buffer().buffer();
  pb::SessionRequest from_lost;
  from_lost.set_id(3);
  from_lost.mutable_peer_pull()->set_endpoint(lost);
  from_lost.mutable_peer_pull()->set_grant("the lost server's grant");
  from_lost.mutable_peer_pull()->set_size(kBytes);
  from_lost.mutable_peer_pull()->set_dst_buffer(hs);
  pb::SessionReply reply = src.Call(from_lost);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kUnavailable)) << reply.message();
  EXPECT_EQ(reply.message(), "peer unreachable: " + lost);
  EXPECT_EQ(reply.lost_endpoint(), lost);

  pb::SessionRequest after;
  after.set_id(2);
  after.mutable_peer_pull()->set_endpoint((*source)->address());
  after.mutable_peer_pull()->set_grant(grant);
  after.mutable_peer_pull()->set_size(kBytes);
  after.mutable_peer_pull()->set_dst_buffer(hd);
  after.mutable_peer_pull()->set_after(3);
  reply = dst.Call(after);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition))
      << reply.message();
  EXPECT_EQ(reply.message(), absl::StrCat("peer_pull from ", (*source)->address(),
                                          ": source command 3 failed: peer unreachable: ", lost));
  EXPECT_EQ(reply.lost_endpoint(), lost);
  ExpectHealthy();
}

pb::SessionRequest PushRequest(uint64_t id, const std::string& endpoint, uint64_t buffer,
                               uint64_t size, const std::string& grant, uint64_t tag) {
  pb::SessionRequest p;
  p.set_id(id);
  p.mutable_peer_push()->set_endpoint(endpoint);
  pb::PushPiece* piece = p.mutable_peer_push()->add_pieces();
  piece->set_buffer(buffer);
  piece->set_size(size);
  piece->set_grant(grant);
  piece->set_tag(tag);
  return p;
}

pb::SessionRequest AwaitRequest(uint64_t id, const std::string& endpoint, uint64_t tag,
                                uint64_t buffer, uint64_t offset, uint64_t size) {
  pb::SessionRequest a;
  a.set_id(id);
  pb::AwaitPush* await = a.mutable_await_push();
  await->set_endpoint(endpoint);
  await->set_tag(tag);
  await->set_dst_buffer(buffer);
  await->set_dst_offset(offset);
  await->set_size(size);
  return a;
}

// A push goes from the source server to the destination's mailbox in the source's command
// order (what was written before it, not after), and the destination's AwaitPush, however
// early it comes, waits for it there and writes it.
TEST_F(ServiceTest, PeerPushReachesTheAwaitOfAnotherServer) {
  PeerPair pair = StartWithPeer();
  ASSERT_NE(pair.peer, nullptr);
  SessionStream& src = *pair.src;
  SessionStream& dst = *pair.dst;
  constexpr uint64_t kBytes = 4096;
  const std::string first = RandomBytes(kBytes, 5), second = RandomBytes(kBytes, 6);
  const uint64_t hs = src.Call(AllocRequest(1, 0, kBytes)).alloc_buffer().buffer();
  const uint64_t hd = dst.Call(AllocRequest(1, 1, kBytes + 16)).alloc_buffer().buffer();
  // Without a grant of its buffer an await has nothing to name its piece by.
  EXPECT_EQ(dst.Call(AwaitRequest(2, pair.peer->address(), 7, hd, 16, kBytes)).code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  const std::string grant = dst.Call(GrantRequest(3, hd)).grant().grant();
  ASSERT_FALSE(grant.empty());
  std::atomic<bool> arrived{false};
  pb::SessionReply reply;
  std::thread waiter([&] {
    reply = dst.Call(AwaitRequest(4, pair.peer->address(), 7, hd, 16, kBytes));
    arrived = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(arrived.load());  // nothing pushed yet.
  ASSERT_EQ(src.Call(WriteRequest(2, hs, 0, first)).code(), 0);
  pb::SessionReply pushed = src.Call(PushRequest(3, server_->address(), hs, kBytes, grant, 7));
  ASSERT_EQ(pushed.code(), 0) << pushed.message();
  ASSERT_EQ(src.Call(WriteRequest(4, hs, 0, second)).code(), 0);
  waiter.join();
  ASSERT_EQ(reply.code(), 0) << reply.message();
  grpc::Status st;
  EXPECT_EQ(Download(stub_.get(), "", dst.id(), hd, 16, kBytes, &st), first);

  // A piece of another size than the await's is refused there, not written.
  ASSERT_EQ(src.Call(PushRequest(5, server_->address(), hs, kBytes / 2, grant, 8)).code(), 0);
  reply = dst.Call(AwaitRequest(5, pair.peer->address(), 8, hd, 0, kBytes));
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << reply.message();
  // A tag delivered twice, and a grant the destination never made, are the push's errors.
  ASSERT_EQ(src.Call(PushRequest(6, server_->address(), hs, 8, grant, 9)).code(), 0);
  reply = src.Call(PushRequest(7, server_->address(), hs, 8, grant, 9));
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kAlreadyExists)) << reply.message();
  reply = src.Call(PushRequest(8, server_->address(), hs, 8, std::string(32, '0'), 10));
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kNotFound)) << reply.message();
  // The source range is checked before anything is sent.
  reply = src.Call(PushRequest(9, server_->address(), hs, kBytes + 1, grant, 11));
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << reply.message();
  ExpectHealthy();
}

// An await whose source server dies fails with "peer unreachable" within seconds; a push to
// a server that is gone fails the same way at the source.
TEST_F(ServiceTest, PeerPushAndAwaitFailWhenThePeerIsGone) {
  StartServer();
  auto other = StartPeerServer();
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string gone = (*other)->address();
  SessionStream dst(stub_.get(), "");
  const uint64_t hd = dst.Call(AllocRequest(1, 0, 64)).alloc_buffer().buffer();
  const std::string grant = dst.Call(GrantRequest(2, hd)).grant().grant();
  {
    // The peer channel is up before the source goes (as in a session that pushed before).
    auto other_stub = Connect(gone);
    SessionStream src(other_stub.get(), "");
    const uint64_t hs = src.Call(AllocRequest(1, 0, 64)).alloc_buffer().buffer();
    ASSERT_EQ(src.Call(PushRequest(2, server_->address(), hs, 64, grant, 1)).code(), 0);
    ASSERT_EQ(dst.Call(AwaitRequest(3, gone, 1, hd, 0, 64)).code(), 0);
  }
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    other->reset();
  });
  const auto start = std::chrono::steady_clock::now();
  pb::SessionReply reply = dst.Call(AwaitRequest(4, gone, 2, hd, 0, 64));
  killer.join();
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kUnavailable)) << reply.message();
  EXPECT_TRUE(absl::StrContains(reply.message(), "peer unreachable: " + gone)) << reply.message();
  EXPECT_EQ(reply.lost_endpoint(), gone);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The next await on that buffer (a step queued behind) fails at once, with the reason.
  const auto again = std::chrono::steady_clock::now();
  reply = dst.Call(AwaitRequest(5, gone, 3, hd, 0, 64));
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kUnavailable)) << reply.message();
  EXPECT_TRUE(absl::StrContains(reply.message(), "an earlier piece of this buffer was lost"))
      << reply.message();
  EXPECT_LT(std::chrono::steady_clock::now() - again, std::chrono::seconds(1));
  // This server pushes to the one that is gone.
  reply = dst.Call(PushRequest(5, gone, hd, 64, grant, 3));
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kUnavailable)) << reply.message();
  EXPECT_TRUE(absl::StrContains(reply.message(), "peer unreachable: " + gone)) << reply.message();
  ExpectHealthy();
}

// A push to a peer that went away and came back on the same address reaches the new
// process: the source's channel, which saw the peer fail, dials it again instead of failing
// the push at once (what faults_kill does to a server between two runs of a split).
TEST_F(ServiceTest, PeerPushReachesAPeerRestartedOnTheSameAddress) {
  StartServer();
  SessionStream src(stub_.get(), "");
  const uint64_t hs = src.Call(AllocRequest(1, 0, 64)).alloc_buffer().buffer();
  ASSERT_EQ(src.Call(WriteRequest(2, hs, 0, RandomBytes(64, 9))).code(), 0);
  auto peer = StartPeerServer();
  ASSERT_TRUE(peer.ok()) << peer.status();
  const int port = (*peer)->port();
  const std::string address = (*peer)->address();
  // Pushes into a session of `server`; the reply of the push.
  uint64_t id = 3;
  auto push_to = [&](RpcServer& server, uint64_t tag) {
    auto stub = Connect(server.address());
    SessionStream dst(stub.get(), "");
    const uint64_t hd = dst.Call(AllocRequest(1, 0, 64)).alloc_buffer().buffer();
    const std::string grant = dst.Call(GrantRequest(2, hd)).grant().grant();
    pb::SessionReply pushed = src.Call(PushRequest(id++, address, hs, 64, grant, tag));
    if (pushed.code() == 0) {
      EXPECT_EQ(dst.Call(AwaitRequest(3, address, tag, hd, 0, 64)).code(), 0);
    }
    return pushed;
  };
  pb::SessionReply reply = push_to(**peer, 1);
  ASSERT_EQ(reply.code(), 0) << reply.message();
  peer->reset();
  // The source sees it gone, a few times (each failed dial lengthens the channel's backoff).
  for (int i = 0; i < 2; ++i) {
    reply = src.Call(PushRequest(id++, address, hs, 64, std::string(32, '0'), 2));
    EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kUnavailable)) << reply.message();
  }
  auto restarted = StartPeerServer(port);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  reply = push_to(**restarted, 3);
  EXPECT_EQ(reply.code(), 0) << reply.message();
  ExpectHealthy();
}

TEST_F(ServiceTest, SixteenConcurrentSessionsThenNothingHeld) {
  StartServer();
  constexpr int kSessions = 16;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      SessionStream s(stub_.get(), "");
      if (!s.ok()) return;
      const uint32_t device = i % 2;
      const uint64_t h =
          s.Call(AllocRequest(1, device, MatMulAdd::kBufferBytes)).alloc_buffer().buffer();
      MatMulAdd mm(100 + i);
      // Weights and activations over Upload (a with a hash, so some hit the cache).
      if (!Upload(stub_.get(), "", s.id(), h, MatMulAdd::kAOff, testing::Bytes(mm.a), true)
               .status.ok() ||
          !Upload(stub_.get(), "", s.id(), h, MatMulAdd::kXOff, testing::Bytes(mm.x), false)
               .status.ok() ||
          !Upload(stub_.get(), "", s.id(), h, MatMulAdd::kBOff, testing::Bytes(mm.b), false)
               .status.ok()) {
        return;
      }
      for (int step = 0; step < 3; ++step) {
        pb::SessionRequest c = mm.Compute(2 + step, h, device, 42, step == 0);
        c.mutable_compute()->clear_inputs();
        pb::SessionReply r = s.Call(c);
        if (r.code() != 0 ||
            !testing::NearlyEqual(testing::ToFloats(r.compute().outputs(0)), mm.Expected())) {
          return;
        }
      }
      grpc::Status st;
      const std::string out = Download(stub_.get(), "", s.id(), h, MatMulAdd::kOutOff,
                                       MatMulAdd::M * MatMulAdd::N * 4, &st);
      if (!st.ok() || !testing::NearlyEqual(testing::ToFloats(out), mm.Expected())) return;
      if (!s.Close().ok()) return;
      ++good;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(good.load(), kSessions);
  EXPECT_EQ(server_->metrics().buffers(), 0);
  EXPECT_EQ(server_->metrics().buffer_bytes(), 0);
  EXPECT_EQ(server_->metrics().sessions_active(), 0);
  // And what Prometheus would see.
  const std::string text = testing::ScrapeMetrics(server_->metrics().exposer_port());
  EXPECT_NE(text.find("\ntg_buffers 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntg_buffer_bytes 0\n"), std::string::npos);
  EXPECT_NE(text.find("\ntg_sessions_total 16\n"), std::string::npos);
  EXPECT_NE(text.find("tg_compute_total 48"), std::string::npos);
  EXPECT_NE(text.find("tg_requests_total{code=\"OK\"}"), std::string::npos);
  ExpectHealthy();
}

// FillPieces with a region (protocol minor 10): the header names a whole cached piece (proof
// over all of it) and the server writes only the region's rows, where a naive copy puts them;
// without the proof nothing is written; a region that is not rows of the piece, or whose
// rows would overlap another piece's in the call, is INVALID_ARGUMENT.
TEST_F(ServiceTest, FillPiecesWritesRowsOfAPieceItHas) {
  StartServer();
  SessionStream s(stub_.get(), "");
  const size_t n = 64 << 10;
  const std::string piece = RandomBytes(n, 21);
  const uint64_t h = s.Call(AllocRequest(1, 0, 2 * n)).alloc_buffer().buffer();
  ASSERT_TRUE(Upload(stub_.get(), "", s.id(), h, n, piece, true).status.ok());  // now cached.
  auto region = [&](uint64_t at, uint64_t offset, uint64_t row, uint64_t rows, uint64_t stride,
                    uint64_t buffer_stride, bool prove = true) {
    pb::UploadHeader p = Piece(h, at, piece, "", prove ? s.id() : "");
    p.set_size(rows * row);
    pb::PieceRegion* r = p.mutable_region();
    r->set_piece_size(n);
    r->set_offset(offset);
    r->set_row_size(row);
    r->set_rows(rows);
    r->set_stride(stride);
    r->set_buffer_stride(buffer_stride);
    return p;
  };
  pb::FillPiecesReply reply;
  ASSERT_TRUE(FillPieces(stub_.get(), "", s.id(),
                         {region(0, 50, 100, 8, 1000, 200), region(4096, 7, 3000, 1, 0, 0, false)},
                         &reply)
                  .ok());
  ASSERT_EQ(reply.results_size(), 2);
  EXPECT_TRUE(reply.results(0).have_it());
  EXPECT_EQ(reply.results(0).source(), pb::UPLOAD_SOURCE_CACHE);
  EXPECT_EQ(reply.results(0).received(), 800u);
  EXPECT_TRUE(reply.results(1).send());  // no proof.
  std::string want(8 * 200, '\0');
  for (size_t i = 0; i < 8; ++i) want.replace(i * 200, 100, piece.substr(50 + i * 1000, 100));
  grpc::Status st;
  EXPECT_TRUE(Download(stub_.get(), "", s.id(), h, 0, want.size(), &st) == want);
  EXPECT_TRUE(Download(stub_.get(), "", s.id(), h, 4096, 3000, &st) == std::string(3000, '\0'));
  EXPECT_EQ(server_->metrics().cache_hit_bytes(), 800u);
  for (const pb::UploadHeader& bad :
       {region(0, 0, 100, 8, 50, 200), region(0, n - 50, 100, 1, 0, 0),
        region(0, 0, 100, 8, 1000, 200 + 1, true), [&] {
          pb::UploadHeader p = region(0, 0, 100, 2, 1000, 200);
          p.set_size(100);
          return p;
        }()}) {
    pb::FillPiecesReply r;
    if (bad.region().buffer_stride() == 201) {
      // Spans overlapping another region's in the same call.
      EXPECT_EQ(
          FillPieces(stub_.get(), "", s.id(), {bad, region(300, 0, 100, 1, 0, 0)}, &r).error_code(),
          grpc::StatusCode::INVALID_ARGUMENT);
      continue;
    }
    EXPECT_EQ(FillPieces(stub_.get(), "", s.id(), {bad}, &r).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << bad.DebugString();
  }
  ExpectHealthy();
}

}  // namespace
}  // namespace tg::server
