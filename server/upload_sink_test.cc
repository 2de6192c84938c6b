// Tests of server/upload_sink (in-process, no gRPC): a miss stored into a real on-disk cache
// and then served from it, the SHA-256 test vector stored under its name (given by the client,
// or computed by the server for an upload that asks it to store), hash and size
// mismatches, ranges outside the buffer, the chunk limit and the cache's size limit, a
// corrupt cached blob, and a buffer freed mid-upload.
#include "server/upload_sink.h"

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/cache_proof.h"
#include "proto/protocol.h"
#include "server/blob_cache.h"
#include "server/metrics.h"
#include "server/server_testing.h"

namespace tg::server {
namespace {

namespace fs = std::filesystem;
namespace pb = ::tensorgrid::v1;
using testing::AllocRequest;
using testing::FreeRequest;
using testing::ReadRequest;
using testing::Sha256Bytes;
using testing::UploadChunk;
using testing::UploadHeaderMessage;

// SHA-256("abc") from FIPS 180-2: an answer that does not come from the code under test.
constexpr char kAbcSha256Hex[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

std::string Unhex(absl::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class UploadSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SessionEnv env;
    env.devices = testing::TwoCpuDevices();
    ASSERT_EQ(env.devices.size(), 2u);
    env.metrics = &metrics_;
    session_ = std::make_shared<Session>("upload-test", env);
    std::string tmpl = absl::StrCat(::testing::TempDir(), "/tg_upload_sink_XXXXXX");
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    OpenCache(0);
  }
  void TearDown() override {
    cache_.reset();
    fs::remove_all(dir_);
  }

  void OpenCache(uint64_t max_bytes) {
    cache_.reset();
    absl::StatusOr<std::unique_ptr<BlobCache>> cache = BlobCache::Open(dir_ / "cache", max_bytes);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
  }

  uint64_t Alloc(uint64_t size) {
    pb::SessionReply r = session_->Handle(AllocRequest(next_id_++, 0, size));
    EXPECT_EQ(r.code(), 0) << r.message();
    return r.alloc_buffer().buffer();
  }

  std::string Read(uint64_t buffer, uint64_t offset, uint64_t size) {
    pb::SessionReply r = session_->Handle(ReadRequest(next_id_++, buffer, offset, size));
    EXPECT_EQ(r.code(), 0) << r.message();
    return r.read().data();
  }

  pb::CacheStatsReply Stats() {
    pb::SessionRequest r;
    r.set_id(next_id_++);
    r.mutable_cache_stats();
    return session_->Handle(r).cache_stats();
  }

  // With `holds` (the bytes, as an honest client has them) and a sha256, the header carries
  // the proof of possession a cache hit needs.
  absl::StatusOr<std::unique_ptr<UploadSink>> Start(uint64_t buffer, uint64_t offset, uint64_t size,
                                                    std::string sha256 = "",
                                                    const std::string* holds = nullptr) {
    pb::UploadHeader header =
        UploadHeaderMessage(session_->id(), buffer, offset, size, std::move(sha256)).header();
    if (holds != nullptr && !header.sha256().empty()) {
      const rpc::Sha256Digest proof =
          *rpc::CacheProof(session_->id(), holds->data(), holds->size());
      header.set_cache_proof(proof.data(), proof.size());
    }
    return UploadSink::Start(session_, header, cache_.get(), &metrics_);
  }

  // A whole upload in chunks of `chunk` bytes; the status of the first failing step.
  absl::StatusOr<uint64_t> Upload(uint64_t buffer, uint64_t offset, const std::string& data,
                                  std::string sha256, size_t chunk = 1000) {
    absl::StatusOr<std::unique_ptr<UploadSink>> sink =
        Start(buffer, offset, data.size(), std::move(sha256), &data);
    if (!sink.ok()) return sink.status();
    if ((*sink)->have_it()) return absl::AlreadyExistsError("have it");
    for (size_t off = 0; off < data.size(); off += chunk) {
      if (absl::Status s = (*sink)->Receive(UploadChunk(data.substr(off, chunk))); !s.ok())
        return s;
    }
    return (*sink)->Finish();
  }

  // A 100-byte buffer holding a previous owner's bytes (0xab) and an upload of all of it that
  // has received its first 40 bytes ('d').
  std::unique_ptr<UploadSink> UploadStartedOverUsedMemory(uint64_t* buffer_out) {
    const uint64_t a = Alloc(100);
    *buffer_out = a;
    absl::StatusOr<std::shared_ptr<SessionBuffer>> buffer = session_->FindBuffer(a);
    EXPECT_TRUE(buffer.ok());
    std::memset((*buffer)->HostPointer(0), 0xab, 100);
    absl::StatusOr<std::unique_ptr<UploadSink>> sink = Start(a, 0, 100);
    EXPECT_TRUE(sink.ok()) << sink.status();
    EXPECT_TRUE((*sink)->Receive(UploadChunk(std::string(40, 'd'))).ok());
    return std::move(*sink);
  }

  fs::path BlobPath(absl::string_view hex) {
    return dir_ / "cache" / std::string(hex.substr(0, 2)) / std::string(hex);
  }

  Metrics metrics_;
  std::shared_ptr<Session> session_;
  fs::path dir_;
  std::unique_ptr<BlobCache> cache_;
  uint64_t next_id_ = 1;
};

TEST_F(UploadSinkTest, MissIsStoredThenServedFromTheCache) {
  const std::string data = RandomBytes(10000, 1);
  const uint64_t a = Alloc(20000);
  absl::StatusOr<uint64_t> got = Upload(a, 100, data, Sha256Bytes(data), /*chunk=*/3000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, data.size());
  EXPECT_EQ(Read(a, 100, data.size()), data);
  EXPECT_EQ(Read(a, 0, 100), std::string(100, '\0'));  // nothing written outside the range.
  EXPECT_EQ(cache_->blob_count(), 1u);
  EXPECT_EQ(metrics_.upload_bytes(), data.size());

  // The same bytes into another buffer: copied from the cache, no chunk needed.
  const uint64_t b = Alloc(data.size());
  // Without the proof that it holds them, a client naming the hash gets nothing from the cache.
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = Start(b, 0, data.size(), Sha256Bytes(data));
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_FALSE((*sink)->have_it());
  sink = Start(b, 0, data.size(), Sha256Bytes(data), &data);
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE((*sink)->have_it());
  EXPECT_EQ(Read(b, 0, data.size()), data);
  EXPECT_EQ((*sink)->Receive(UploadChunk("x")).code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<uint64_t> finished = (*sink)->Finish();
  ASSERT_TRUE(finished.ok());
  EXPECT_EQ(*finished, data.size());
  const pb::CacheStatsReply stats = Stats();
  EXPECT_EQ(stats.uploaded_bytes(), data.size());
  EXPECT_EQ(stats.cache_hit_bytes(), data.size());
  EXPECT_EQ(metrics_.cache_hit_bytes(), data.size());
}

TEST_F(UploadSinkTest, KnownDigestIsStoredUnderItsName) {
  const uint64_t a = Alloc(16);
  absl::StatusOr<uint64_t> got = Upload(a, 5, "abc", Unhex(kAbcSha256Hex), /*chunk=*/1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(ReadFile(BlobPath(kAbcSha256Hex)), "abc");
}

TEST_F(UploadSinkTest, WithoutAHashNothingIsCached) {
  const uint64_t a = Alloc(16);
  ASSERT_TRUE(Upload(a, 0, "abc", "").ok());
  EXPECT_EQ(Read(a, 0, 3), "abc");
  EXPECT_EQ(cache_->blob_count(), 0u);
}

// UploadHeader.store: no digest from the client; the server keeps the bytes under their own
// SHA-256 (the FIPS vector names the file, not the code under test), and CacheStats counts it.
TEST_F(UploadSinkTest, StoreWithoutAHashKeepsTheBytesUnderTheirOwnHash) {
  SessionEnv env;
  env.devices = testing::TwoCpuDevices();
  env.cache = cache_.get();
  session_ = std::make_shared<Session>("store-test", env);
  EXPECT_EQ(Stats().cache_blobs(), 0u);
  const uint64_t a = Alloc(16);
  pb::UploadMessage header = UploadHeaderMessage(session_->id(), a, 2, 3);
  header.mutable_header()->set_store(true);
  absl::StatusOr<std::unique_ptr<UploadSink>> sink =
      UploadSink::Start(session_, header.header(), cache_.get(), &metrics_);
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE((*sink)->Receive(UploadChunk("ab")).ok());
  ASSERT_TRUE((*sink)->Receive(UploadChunk("c")).ok());
  absl::StatusOr<uint64_t> got = (*sink)->Finish();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 3u);
  EXPECT_EQ(Read(a, 2, 3), "abc");
  EXPECT_EQ(ReadFile(BlobPath(kAbcSha256Hex)), "abc");
  EXPECT_EQ(Stats().cache_blobs(), 1u);
  // Served from the cache to a client that asks by the hash.
  const std::string abc = "abc";
  sink = Start(Alloc(3), 0, 3, Unhex(kAbcSha256Hex), &abc);
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_TRUE((*sink)->have_it());
  // Without a cache the flag changes nothing.
  sink = UploadSink::Start(session_, header.header(), nullptr, &metrics_);
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE((*sink)->Receive(UploadChunk("xyz")).ok());
  EXPECT_TRUE((*sink)->Finish().ok());
  EXPECT_EQ(cache_->blob_count(), 1u);
}

TEST_F(UploadSinkTest, HashMismatchIsRefusedAndNotCached) {
  const uint64_t a = Alloc(16);
  absl::StatusOr<uint64_t> got = Upload(a, 0, "abd", Unhex(kAbcSha256Hex));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find(kAbcSha256Hex), std::string::npos) << got.status();
  EXPECT_EQ(cache_->blob_count(), 0u);
  EXPECT_FALSE(fs::exists(BlobPath(kAbcSha256Hex)));
  // Not a SHA-256 at all.
  EXPECT_EQ(Start(a, 0, 3, "abcde").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(UploadSinkTest, WrongSizeIsRefused) {
  const uint64_t a = Alloc(64);
  // Fewer bytes than announced.
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = Start(a, 0, 10);
  ASSERT_TRUE(sink.ok());
  ASSERT_TRUE((*sink)->Receive(UploadChunk("abc")).ok());
  absl::StatusOr<uint64_t> got = (*sink)->Finish();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("received 3 of the 10"), std::string::npos) << got.status();
  // More: the chunk that passes the announced size is refused whole.
  sink = Start(a, 20, 4);
  ASSERT_TRUE(sink.ok());
  ASSERT_TRUE((*sink)->Receive(UploadChunk("123")).ok());
  absl::Status s = (*sink)->Receive(UploadChunk("45"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the 4 bytes the header announced"), std::string::npos) << s;
  EXPECT_EQ(Read(a, 20, 8), std::string("123") + std::string(5, '\0'));
  // Something other than a chunk after the header.
  EXPECT_EQ((*sink)->Receive(UploadHeaderMessage(session_->id(), a, 0, 1)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(UploadSinkTest, RangeOutsideTheBufferIsRefused) {
  const uint64_t a = Alloc(100);
  EXPECT_EQ(Start(a, 90, 11).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(a, 101, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(a, UINT64_MAX - 4, 10).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(a + 12345, 0, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Start(0, 0, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Start(a, 90, 10).ok());  // the last bytes exactly.
  EXPECT_TRUE(Start(a, 100, 0).ok());
}

TEST_F(UploadSinkTest, ChunkLimit) {
  const uint64_t a = Alloc(rpc::kChunkBytes + 1);
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = Start(a, 0, rpc::kChunkBytes + 1);
  ASSERT_TRUE(sink.ok());
  absl::Status s = (*sink)->Receive(UploadChunk(std::string(rpc::kChunkBytes + 1, 'z')));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(absl::StrCat(rpc::kChunkBytes)), std::string::npos) << s;
  EXPECT_TRUE((*sink)->Receive(UploadChunk(std::string(rpc::kChunkBytes, 'z'))).ok());
  EXPECT_TRUE((*sink)->Receive(UploadChunk("z")).ok());
  EXPECT_TRUE((*sink)->Finish().ok());
}

TEST_F(UploadSinkTest, CacheQuota) {
  OpenCache(/*max_bytes=*/1024);
  const uint64_t a = Alloc(8192);
  const uint64_t held = session_->bytes_held();
  // Larger than the whole cache: the upload succeeds, the blob is not kept.
  const std::string big = RandomBytes(4096, 2);
  ASSERT_TRUE(Upload(a, 0, big, Sha256Bytes(big)).ok());
  EXPECT_EQ(Read(a, 0, big.size()), big);
  EXPECT_EQ(cache_->blob_count(), 0u);
  // Two of 600 bytes: the second evicts the first, staying under the limit.
  const std::string one = RandomBytes(600, 3), two = RandomBytes(600, 4);
  ASSERT_TRUE(Upload(a, 0, one, Sha256Bytes(one)).ok());
  ASSERT_TRUE(Upload(a, 1000, two, Sha256Bytes(two)).ok());
  EXPECT_EQ(cache_->blob_count(), 1u);
  EXPECT_LE(cache_->total_bytes(), 1024u);
  EXPECT_EQ(Upload(a, 2000, two, Sha256Bytes(two)).status().code(),
            absl::StatusCode::kAlreadyExists);               // have it.
  EXPECT_TRUE(Upload(a, 3000, one, Sha256Bytes(one)).ok());  // evicted: sent again.
  // Uploads fill buffers the session already holds: no bytes against its memory limit.
  EXPECT_EQ(session_->bytes_held(), held);
}

TEST_F(UploadSinkTest, CorruptCachedBlobIsSentAgain) {
  const uint64_t a = Alloc(16);
  ASSERT_TRUE(Upload(a, 0, "abc", Unhex(kAbcSha256Hex)).ok());
  {
    std::ofstream out(BlobPath(kAbcSha256Hex), std::ios::binary | std::ios::trunc);
    out << "abd";
  }
  const uint64_t b = Alloc(16);
  const std::string abc = "abc";
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = Start(b, 0, 3, Unhex(kAbcSha256Hex), &abc);
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_FALSE((*sink)->have_it());
  // What the failed read left in the buffer is zeroed before a read; the chunks replace it.
  EXPECT_EQ(Read(b, 0, 3), std::string(3, '\0'));
  ASSERT_TRUE((*sink)->Receive(UploadChunk("abc")).ok());
  ASSERT_TRUE((*sink)->Finish().ok());
  EXPECT_EQ(Read(b, 0, 3), "abc");
  EXPECT_EQ(ReadFile(BlobPath(kAbcSha256Hex)), "abc");  // stored again, intact.
}

TEST_F(UploadSinkTest, FreeMidUploadFreesTheBufferAtOnce) {
  const uint64_t a = Alloc(64);
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = Start(a, 0, 6);
  ASSERT_TRUE(sink.ok());
  ASSERT_TRUE((*sink)->Receive(UploadChunk("abc")).ok());
  EXPECT_EQ(session_->Handle(FreeRequest(next_id_++, a)).code(), 0);
  EXPECT_EQ(session_->bytes_held(), 0u);
  EXPECT_EQ(metrics_.buffers(), 0);  // the sink holds it weakly: the memory went with Free.
  EXPECT_EQ((*sink)->Receive(UploadChunk("def")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*sink)->Finish().ok());
}

}  // namespace
}  // namespace tg::server

namespace tg::server {
namespace {

// An upload that ends early leaves what it did not fill to be zeroed: the bytes a previous
// owner left in the memory never reach the client.
TEST_F(UploadSinkTest, AnUnfinishedUploadZeroesWhatItDidNotFill) {
  uint64_t a = 0;
  UploadStartedOverUsedMemory(&a).reset();  // the stream broke off.
  EXPECT_EQ(Read(a, 0, 100), std::string(40, 'd') + std::string(60, '\0'));
}

// A Read of the range while the upload is still in flight (the client reads, or another stream
// of the session copies from it) sees the chunks that landed and zeros, never the bytes another
// session left in the memory; the chunks after it still land.
TEST_F(UploadSinkTest, AReadDuringAnUploadSeesNoPreviousOwnersBytes) {
  uint64_t a = 0;
  std::unique_ptr<UploadSink> sink = UploadStartedOverUsedMemory(&a);
  EXPECT_EQ(Read(a, 0, 100), std::string(40, 'd') + std::string(60, '\0'));
  ASSERT_TRUE(sink->Receive(UploadChunk(std::string(60, 'e'))).ok());
  ASSERT_TRUE(sink->Finish().ok());
  EXPECT_EQ(Read(a, 0, 100), std::string(40, 'd') + std::string(60, 'e'));
}

TEST_F(UploadSinkTest, FreeMidUploadReleasesTheBufferAndFailsTheNextChunk) {
  const uint64_t b = Alloc(64);
  std::weak_ptr<SessionBuffer> buffer = *session_->FindBuffer(b);
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = Start(b, 0, 64);
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE((*sink)->Receive(testing::UploadChunk(std::string(32, 'a'))).ok());
  ASSERT_EQ(session_->Handle(FreeRequest(next_id_++, b)).code(), 0);
  // The sink holds the buffer weakly: the memory went with the Free.
  EXPECT_TRUE(buffer.expired());
  absl::Status s = (*sink)->Receive(testing::UploadChunk(std::string(32, 'b')));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("was freed"), std::string::npos) << s;
}

TEST_F(UploadSinkTest, SessionEndReleasesTheBufferUnderAnOpenUpload) {
  const uint64_t b = Alloc(64);
  std::weak_ptr<SessionBuffer> buffer = *session_->FindBuffer(b);
  absl::StatusOr<std::unique_ptr<UploadSink>> sink = Start(b, 0, 64);
  ASSERT_TRUE(sink.ok()) << sink.status();
  session_->Close();
  EXPECT_TRUE(buffer.expired());
  EXPECT_EQ((*sink)->Receive(testing::UploadChunk(std::string(8, 'b'))).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*sink)->Finish().ok());
}

}  // namespace
}  // namespace tg::server
