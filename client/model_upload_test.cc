// UploadModelWeights against real rpc-servers on loopback (in-process): the bytes that land
// are the client's file (downloaded and compared), and each way of getting them there is
// counted where it happened: over the network, from the server's cache, from the server's
// own copy under --model-dir (all of it, or all but a changed piece), on two servers at once;
// sidecars that fit are used, others are refused with a warning.
#include "client/model_upload.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backends/register_builtin.h"
#include "client/client_testing.h"
#include "client/remote_device.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "proto/model_hashes.h"
#include "proto/parallel_hash.h"
#include "server/blob_cache.h"
#include "server/metrics.h"
#include "server/model_index.h"
#include "server/model_testing.h"
#include "server/rpc_server.h"

namespace tg::rpc {
namespace {

namespace fs = std::filesystem;
using server::testing::FactsOf;
using server::testing::FileBytes;
using server::testing::WriteTestModel;

// The model: small tensors and one of two pieces.
constexpr int64_t kBigFloats = (kPieceBytes + 4096) / sizeof(float);

// A model file, mapped as the client sees it.
struct ClientFile {
  std::string bytes;
  ModelFileView view;
};

ClientFile Load(const std::string& path) {
  ClientFile f;
  f.bytes = FileBytes(path);
  const server::testing::TestModelFacts facts = FactsOf(path);
  f.view.path = path;
  f.view.bytes =
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(f.bytes.data()), f.bytes.size());
  f.view.data_start = facts.data_start;
  f.view.tensors = facts.tensors;
  return f;
}

// One rpc-server with its client connection, one remote device and one weight buffer.
struct Server {
  std::unique_ptr<server::RpcServer> server;
  std::unique_ptr<RemoteFamily> family;
  std::unique_ptr<Buffer> buffer;
  RemoteBuffer* remote() { return static_cast<RemoteBuffer*>(buffer.get()); }
};

class ModelUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    root_ = server::testing::FreshDir("model_upload");
    model_ = root_ + "/client/m.gguf";
    fs::create_directories(root_ + "/client");
    ASSERT_TRUE(WriteTestModel(model_, {64, kBigFloats, 1000}, 9));
    file_ = Load(model_);
  }

  Server Start(const std::vector<std::string>& model_dirs, const std::string& cache = "") {
    Server s;
    server::ServerConfig config;
    config.port = 0;
    config.devices = {Registry::Get().CpuDevice()};
    config.model_dirs = model_dirs;
    config.cache_dir = cache;
    absl::StatusOr<std::unique_ptr<server::RpcServer>> server = server::RpcServer::Start(config);
    EXPECT_TRUE(server.ok()) << server.status();
    s.server = std::move(*server);
    if (s.server->models() != nullptr) s.server->models()->WaitUntilIndexed();
    ClientOptions options;
    options.progress = false;
    absl::StatusOr<std::unique_ptr<Connection>> c = Connection::Open(s.server->address(), options);
    EXPECT_TRUE(c.ok()) << c.status();
    s.family = std::make_unique<RemoteFamily>(std::move(*c));
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        s.family->devices()[0]->default_buffer_type()->Allocate(TensorBytes() + 4096);
    EXPECT_TRUE(b.ok()) << b.status();
    s.buffer = std::move(*b);
    return s;
  }

  uint64_t TensorBytes() const {
    uint64_t n = 0;
    for (const FileRange& t : file_.view.tensors) n += t.size;
    return n;
  }

  // Every tensor, back to back from `base` in the buffer.
  std::vector<WeightCopy> Copies(Server& s, uint64_t base = 0) {
    std::vector<WeightCopy> copies;
    uint64_t at = base;
    for (const FileRange& t : file_.view.tensors) {
      copies.push_back({s.remote(), at, t});
      at += t.size;
    }
    return copies;
  }

  // The buffer's bytes equal the client file's tensors.
  void ExpectLanded(Server& s, uint64_t base = 0) {
    std::string got(TensorBytes(), '\0');
    ASSERT_TRUE(s.remote()
                    ->connection()
                    ->Download(s.remote()->handle(), base, got.data(), got.size())
                    .ok());
    std::string want;
    for (const FileRange& t : file_.view.tensors) want += file_.bytes.substr(t.offset, t.size);
    EXPECT_TRUE(got == want) << "the server holds other bytes than the client's file";
  }

  absl::StatusOr<std::vector<BufferLoad>> Upload(absl::Span<const WeightCopy> copies) {
    ModelUploadOptions options;
    options.warn = [this](const std::string& w) { warnings_.push_back(w); };
    return UploadModelWeights(file_.view, copies, options);
  }

  // Loads at offset 100 onto a server with a copy of the client's file in its --model-dir:
  // the server reads every byte from its copy, none is sent; *load is what the client saw.
  Server LoadOntoAFullCopy(BufferLoad* load) {
    fs::create_directories(root_ + "/models");
    fs::copy_file(model_, root_ + "/models/copy.gguf");
    Server s = Start({root_ + "/models"});
    absl::StatusOr<std::vector<BufferLoad>> loads = Upload(Copies(s, 100));
    EXPECT_TRUE(loads.ok()) << loads.status();
    if (loads.ok()) *load = (*loads)[0];
    EXPECT_EQ(load->sent, 0u);
    EXPECT_EQ(load->from_file, TensorBytes());
    EXPECT_EQ(load->model_file, "copy.gguf");
    EXPECT_EQ(s.server->metrics().upload_bytes(), 0);
    EXPECT_EQ(s.server->metrics().model_file_bytes(), TensorBytes());
    ExpectLanded(s, 100);
    return s;
  }

  // Loads onto a server whose --model-dir copy differs from the client's file in one byte of
  // the big tensor's second piece: that piece is sent, the rest read from the copy.
  Server LoadOntoAChangedCopy() {
    fs::create_directories(root_ + "/models");
    std::string changed = file_.bytes;
    const FileRange big = file_.view.tensors[1];
    changed[big.offset + kPieceBytes + 10] ^= 0x40;
    std::ofstream(root_ + "/models/m.gguf", std::ios::binary).write(changed.data(), changed.size());
    Server s = Start({root_ + "/models"});
    absl::StatusOr<std::vector<BufferLoad>> loads = Upload(Copies(s));
    EXPECT_TRUE(loads.ok()) << loads.status();
    if (loads.ok()) {
      EXPECT_EQ((*loads)[0].sent, big.size - kPieceBytes);
      EXPECT_EQ((*loads)[0].from_file, TensorBytes() - (big.size - kPieceBytes));
    }
    ExpectLanded(s);
    return s;
  }

  std::string root_, model_;
  ClientFile file_;
  std::vector<std::string> warnings_;
};

TEST_F(ModelUploadTest, APlainServerReceivesEveryByte) {
  Server s = Start({});
  absl::StatusOr<std::vector<BufferLoad>> loads = Upload(Copies(s));
  ASSERT_TRUE(loads.ok()) << loads.status();
  ASSERT_EQ(loads->size(), 1u);
  EXPECT_EQ((*loads)[0].sent, TensorBytes());
  EXPECT_EQ((*loads)[0].bytes, TensorBytes());
  EXPECT_EQ((*loads)[0].cached + (*loads)[0].from_file, 0u);
  ExpectLanded(s);
}

TEST_F(ModelUploadTest, AServerWithTheFileReadsItFromItsOwnDisk) {
  BufferLoad load;
  Server s = LoadOntoAFullCopy(&load);
  EXPECT_EQ(load.hashed, TensorBytes());  // no sidecar: the client hashed to ask.
}

TEST_F(ModelUploadTest, AChangedPieceOfTheServersCopyIsSentTheRestIsRead) {
  Server s = LoadOntoAChangedCopy();
  // Without a sidecar every piece is asked for in an Upload call of its own.
  EXPECT_EQ(s.server->metrics().upload_calls(server::Metrics::UploadCall::kUpload),
            SplitIntoPieces(file_.view.tensors).size());
}

TEST_F(ModelUploadTest, ACacheServesTheSecondLoad) {
  const std::string cache = root_ + "/cache";
  {
    Server s = Start({}, cache);
    absl::StatusOr<std::vector<BufferLoad>> loads = Upload(Copies(s));
    ASSERT_TRUE(loads.ok()) << loads.status();
    EXPECT_EQ((*loads)[0].sent, TensorBytes());
    // The cache was empty: the server hashed what it stored, the client nothing.
    EXPECT_EQ((*loads)[0].hashed, 0u);
  }
  Server s = Start({}, cache);  // a restart on the same cache.
  absl::StatusOr<std::vector<BufferLoad>> loads = Upload(Copies(s));
  ASSERT_TRUE(loads.ok()) << loads.status();
  // The client asks by hash now, and the server's blobs are under the right ones.
  EXPECT_EQ((*loads)[0].hashed, TensorBytes());
  EXPECT_EQ((*loads)[0].sent, 0u);
  EXPECT_EQ((*loads)[0].cached, TensorBytes());
  ExpectLanded(s);
}

TEST_F(ModelUploadTest, TwoServersLoadInOneCall) {
  Server a = Start({});
  Server b = Start({}, root_ + "/cache_b");
  std::vector<WeightCopy> copies = Copies(a);
  for (const WeightCopy& c : Copies(b, 64)) copies.push_back(c);
  absl::StatusOr<std::vector<BufferLoad>> loads = Upload(copies);
  ASSERT_TRUE(loads.ok()) << loads.status();
  ASSERT_EQ(loads->size(), 2u);
  for (const BufferLoad& l : *loads) {
    EXPECT_EQ(l.sent, TensorBytes()) << l.endpoint;
    EXPECT_GT(l.seconds, 0) << l.endpoint;
  }
  ExpectLanded(a);
  ExpectLanded(b, 64);
}

ModelHashes HashesOf(const ClientFile& f) {
  ModelHashes h;
  h.identity = IdentityOf(f.view.bytes.subspan(0, f.view.data_start), f.view.bytes.size());
  h.mtime_ns = server::testing::MtimeNs(f.view.path);
  const std::vector<FileRange> pieces = SplitIntoPieces(f.view.tensors);
  const std::vector<Sha256Digest> digests = HashPieces(f.view.bytes, pieces, 2);
  for (size_t i = 0; i < pieces.size(); ++i) h.pieces.push_back({pieces[i], digests[i]});
  return h;
}

TEST_F(ModelUploadTest, ASidecarIsUsedOnlyWhenItFitsTheFile) {
  const std::vector<FileRange> pieces = SplitIntoPieces(file_.view.tensors);
  auto warn = [this](const std::string& w) { warnings_.push_back(w); };
  EXPECT_FALSE(ReadSidecarFor(file_.view, pieces, warn).has_value());
  EXPECT_TRUE(warnings_.empty());  // no sidecar: nothing to say.
  const ModelHashes good = HashesOf(file_);
  ASSERT_TRUE(WriteModelHashes(SidecarPath(model_), good).ok());
  std::optional<std::vector<PieceHash>> used = ReadSidecarFor(file_.view, pieces, warn);
  ASSERT_TRUE(used.has_value());
  EXPECT_EQ(used->size(), pieces.size());
  EXPECT_TRUE(warnings_.empty());
  // Truncated.
  fs::resize_file(SidecarPath(model_), fs::file_size(SidecarPath(model_)) - 40);
  EXPECT_FALSE(ReadSidecarFor(file_.view, pieces, warn).has_value());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("truncated"), std::string::npos) << warnings_[0];
  // Written for another file.
  ModelHashes other = good;
  other.identity.size += 1;
  ASSERT_TRUE(WriteModelHashes(SidecarPath(model_), other).ok());
  EXPECT_FALSE(ReadSidecarFor(file_.view, pieces, warn).has_value());
  ASSERT_EQ(warnings_.size(), 2u);
  EXPECT_NE(warnings_[1].find("another file"), std::string::npos) << warnings_[1];
}

TEST_F(ModelUploadTest, AStaleSidecarNeverPutsWrongBytesOnTheServer) {
  // A sidecar that fits the file's identity and mtime but holds a wrong digest (the file was
  // changed in place and its mtime put back): the server verifies what it receives, the
  // client sends the piece again with its real digest and says the sidecar is stale.
  ModelHashes stale = HashesOf(file_);
  stale.pieces[0].digest[0] ^= 1;
  ASSERT_TRUE(WriteModelHashes(SidecarPath(model_), stale).ok());
  Server s = Start({}, root_ + "/cache");
  absl::StatusOr<std::vector<BufferLoad>> loads = Upload(Copies(s));
  ASSERT_TRUE(loads.ok()) << loads.status();
  ExpectLanded(s);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("is stale"), std::string::npos) << warnings_[0];
}

// With a sidecar the client knows every piece's hash before it sends anything: the pieces a
// server has go in a few FillPieces calls (one per upload stream), not an Upload call each.
TEST_F(ModelUploadTest, ASidecarLetsTheServerFillEveryPieceWithoutAnUploadCall) {
  ASSERT_TRUE(WriteModelHashes(SidecarPath(model_), HashesOf(file_)).ok());
  BufferLoad load;
  Server s = LoadOntoAFullCopy(&load);
  EXPECT_EQ(load.hashed, 0u);
  const server::Metrics& m = s.server->metrics();
  EXPECT_EQ(m.upload_calls(server::Metrics::UploadCall::kUpload), 0);
  EXPECT_GE(m.upload_calls(server::Metrics::UploadCall::kFillPieces), 1);
  EXPECT_LE(m.upload_calls(server::Metrics::UploadCall::kFillPieces),
            s.remote()->connection()->upload_streams());
  EXPECT_TRUE(warnings_.empty());
}

// With a sidecar the piece the server's copy does not have is the only one left to an Upload.
TEST_F(ModelUploadTest, WhatFillPiecesLeavesIsUploaded) {
  ASSERT_TRUE(WriteModelHashes(SidecarPath(model_), HashesOf(file_)).ok());
  Server s = LoadOntoAChangedCopy();
  EXPECT_EQ(s.server->metrics().upload_calls(server::Metrics::UploadCall::kUpload), 1);
}

TEST_F(ModelUploadTest, AWarmCacheWithASidecarFillsEveryPiece) {
  ASSERT_TRUE(WriteModelHashes(SidecarPath(model_), HashesOf(file_)).ok());
  Server s = Start({}, root_ + "/cache");
  ASSERT_TRUE(Upload(Copies(s)).ok());  // an empty cache: sent and stored.
  const double uploads = s.server->metrics().upload_calls(server::Metrics::UploadCall::kUpload);
  absl::StatusOr<std::vector<BufferLoad>> loads = Upload(Copies(s, 64));
  ASSERT_TRUE(loads.ok()) << loads.status();
  EXPECT_EQ((*loads)[0].sent, 0u);
  EXPECT_EQ((*loads)[0].cached, TensorBytes());
  EXPECT_EQ(s.server->metrics().upload_calls(server::Metrics::UploadCall::kUpload), uploads);
  ExpectLanded(s, 64);
}

// A server before FillPieces (protocol minor 7) is asked piece by piece, as before, and
// still serves the pieces from its cache.
TEST_F(ModelUploadTest, AServerBeforeFillPiecesIsAskedPieceByPiece) {
  ASSERT_TRUE(WriteModelHashes(SidecarPath(model_), HashesOf(file_)).ok());
  const std::string cache_dir = root_ + "/cache";
  {
    Server s = Start({}, cache_dir);
    ASSERT_TRUE(Upload(Copies(s)).ok());  // fills the cache.
  }
  absl::StatusOr<std::unique_ptr<server::BlobCache>> cache = server::BlobCache::Open(cache_dir, 0);
  ASSERT_TRUE(cache.ok()) << cache.status();
  server::ServiceOptions options;
  options.devices = {Registry::Get().CpuDevice()};
  options.cache = cache->get();
  testing::OlderMinorService older(options, kMinorFillPieces - 1);
  int port = 0;
  std::unique_ptr<grpc::Server> grpc_server = testing::ServeOnLoopback(&older, &port);
  ASSERT_NE(grpc_server, nullptr);
  ClientOptions client;
  client.progress = false;
  absl::StatusOr<std::unique_ptr<Connection>> c =
      Connection::Open("127.0.0.1:" + std::to_string(port), client);
  ASSERT_TRUE(c.ok()) << c.status();
  Server s;
  s.family = std::make_unique<RemoteFamily>(std::move(*c));
  absl::StatusOr<std::unique_ptr<Buffer>> b =
      s.family->devices()[0]->default_buffer_type()->Allocate(TensorBytes());
  ASSERT_TRUE(b.ok()) << b.status();
  s.buffer = std::move(*b);
  EXPECT_TRUE(absl::IsUnimplemented(s.remote()->connection()->FillPieces({}).status()));
  absl::StatusOr<std::vector<BufferLoad>> loads = Upload(Copies(s));
  ASSERT_TRUE(loads.ok()) << loads.status();
  EXPECT_EQ((*loads)[0].sent, 0u);
  EXPECT_EQ((*loads)[0].cached, TensorBytes());
  ExpectLanded(s);
  s.buffer.reset();
  s.family.reset();
  grpc_server->Shutdown();
}

}  // namespace
}  // namespace tg::rpc
