// Tests of the SHA-256 helper (proto/content_hash.h) and rpc-server's on-disk weight cache
// (server/blob_cache.h): hashing against NIST vectors and sha256sum, hits, misses, corruption,
// LRU eviction, persistence across a reopen, and concurrent use.
#include "server/blob_cache.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/content_hash.h"

namespace tg::server {
namespace {

namespace fs = std::filesystem;
using rpc::DigestHex;
using rpc::Sha256;
using rpc::Sha256Digest;

std::vector<uint8_t> RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// `count` blobs of `size` random bytes, blob i from seed first_seed + i.
std::vector<std::vector<uint8_t>> RandomBlobs(int count, size_t size, uint32_t first_seed) {
  std::vector<std::vector<uint8_t>> blobs;
  for (int i = 0; i < count; ++i) blobs.push_back(RandomBytes(size, first_seed + i));
  return blobs;
}

Sha256Digest DigestOf(const std::vector<uint8_t>& bytes) {
  return Sha256(bytes.data(), bytes.size());
}

std::string HexOf(absl::string_view s) { return DigestHex(Sha256(s.data(), s.size())); }

// Every file under dir (recursively), as paths.
std::vector<fs::path> FilesUnder(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  return files;
}

TEST(ContentHashTest, NistVectors) {
  EXPECT_EQ(HexOf("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HexOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(DigestHex(Sha256(nullptr, 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(HexOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(ContentHashTest, StreamInUnevenPiecesEqualsOneShot) {
  rpc::Sha256Stream abc;
  abc.Update("a", 1);
  abc.Update("bc", 2);
  EXPECT_EQ(DigestHex(abc.Final().value()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::vector<uint8_t> data = RandomBytes(3 << 20, 11);
  rpc::Sha256Stream stream;
  for (size_t pos = 0, piece = 1; pos < data.size(); pos += piece, piece = piece * 3 + 7) {
    stream.Update(data.data() + pos, std::min(piece, data.size() - pos));
  }
  EXPECT_EQ(stream.Final().value(), DigestOf(data));
}

TEST(ContentHashTest, MatchesSha256sumOnLargeBuffer) {
  const std::vector<uint8_t> data = RandomBytes(5 << 20, 7);
  const std::string path = absl::StrCat(::testing::TempDir(), "/tg_sha_", ::getpid(), ".bin");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()),
              static_cast<std::streamsize>(data.size()));
    ASSERT_TRUE(out.good());
  }
  FILE* pipe = ::popen(absl::StrCat("/usr/bin/sha256sum '", path, "'").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[256] = {};
  const bool got_line = std::fgets(line, sizeof(line), pipe) != nullptr;
  const int rc = ::pclose(pipe);
  fs::remove(path);
  ASSERT_TRUE(got_line);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(DigestHex(DigestOf(data)), std::string(line, 64));
}

TEST(ContentHashTest, DigestFromBytes) {
  const Sha256Digest digest = Sha256("abc", 3);
  auto parsed = rpc::DigestFromBytes(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, digest);
  EXPECT_EQ(rpc::DigestFromBytes(std::string(31, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rpc::DigestFromBytes(std::string(33, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class BlobCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = absl::StrCat(::testing::TempDir(), "/tg_blob_cache_XXXXXX");
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    dir_ = absl::StrCat(root_, "/cache");  // Open must create it.
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<BlobCache> OpenCache(uint64_t max_bytes) {
    auto cache = BlobCache::Open(dir_, max_bytes);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }

  std::string PathOf(const Sha256Digest& digest) const {
    const std::string hex = DigestHex(digest);
    return absl::StrCat(dir_, "/", hex.substr(0, 2), "/", hex);
  }

  // Reads a blob, expecting a hit with exactly `want`.
  void ExpectHit(BlobCache& cache, const std::vector<uint8_t>& want) {
    std::vector<uint8_t> got(want.size());
    auto hit = cache.Read(DigestOf(want), got.data(), got.size());
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_TRUE(*hit);
    EXPECT_EQ(got, want);
  }

  // Stores `blob` under its own digest.
  static absl::Status Store(BlobCache& cache, const std::vector<uint8_t>& blob) {
    return cache.Store(DigestOf(blob), blob.data(), blob.size());
  }

  // Expects `blob` not in the cache: not in the index, and no file of it.
  void ExpectAbsent(const BlobCache& cache, const std::vector<uint8_t>& blob) const {
    EXPECT_FALSE(cache.Contains(DigestOf(blob)));
    EXPECT_FALSE(fs::exists(PathOf(DigestOf(blob))));
  }

  void ExpectMiss(BlobCache& cache, const Sha256Digest& digest, size_t size) {
    std::vector<uint8_t> got(size);
    auto hit = cache.Read(digest, got.data(), got.size());
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_FALSE(*hit);
  }

  std::string root_;
  std::string dir_;
};

TEST_F(BlobCacheTest, StoreThenReadRoundTrips) {
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(fs::is_directory(dir_));
  const std::vector<uint8_t> blob = RandomBytes(100000, 1);
  ASSERT_TRUE(Store(*cache, blob).ok());
  EXPECT_TRUE(cache->Contains(DigestOf(blob)));
  EXPECT_EQ(cache->blob_count(), 1u);
  EXPECT_EQ(cache->total_bytes(), blob.size());
  EXPECT_EQ(fs::file_size(PathOf(DigestOf(blob))), blob.size());
  ExpectHit(*cache, blob);

  // Storing it again only touches it.
  ASSERT_TRUE(Store(*cache, blob).ok());
  EXPECT_EQ(cache->blob_count(), 1u);
  EXPECT_EQ(FilesUnder(dir_).size(), 1u);
}

// StoreHashing names the blob by what it wrote: the NIST vector names the file here, and a
// mismatch with the expected digest, or an oversized blob, leaves nothing on disk.
TEST_F(BlobCacheTest, StoreHashingNamesTheBlobByWhatItWrote) {
  auto cache = OpenCache(4 << 20);
  ASSERT_NE(cache, nullptr);
  const std::string abc = "abc";
  absl::StatusOr<BlobCache::Stored> stored = cache->StoreHashing(abc.data(), 3, std::nullopt);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->store_error.ok()) << stored->store_error;
  const std::string hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  EXPECT_EQ(DigestHex(stored->digest), hex);
  std::ifstream in(absl::StrCat(dir_, "/ba/", hex));
  std::string on_disk;
  in >> on_disk;
  EXPECT_EQ(on_disk, "abc");
  // More than one block (1 MiB) at a time, expected right: stored; then read back.
  const std::vector<uint8_t> big = RandomBytes((1 << 20) + 4321, 50);
  stored = cache->StoreHashing(big.data(), big.size(), DigestOf(big));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->digest, DigestOf(big));
  ExpectHit(*cache, big);
  // Expected wrong: the real digest comes back, nothing is stored.
  const std::vector<uint8_t> other = RandomBytes(5000, 51);
  stored = cache->StoreHashing(other.data(), other.size(), DigestOf(big));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->digest, DigestOf(other));
  EXPECT_FALSE(cache->Contains(DigestOf(other)));
  // Over max_bytes: hashed, not stored.
  const std::vector<uint8_t> huge = RandomBytes((4 << 20) + 1, 52);
  stored = cache->StoreHashing(huge.data(), huge.size(), std::nullopt);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->digest, DigestOf(huge));
  EXPECT_FALSE(cache->Contains(DigestOf(huge)));
  EXPECT_EQ(FilesUnder(dir_).size(), 2u);  // abc and big: no temp file left behind.
}

// A writer changing the bytes while they are stored (another upload stream into the same
// buffer range) can change what is stored, never make a blob differ from its name.
TEST_F(BlobCacheTest, BytesChangingDuringAStoreNeverMakeABlobDifferFromItsName) {
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  std::vector<uint8_t> data = RandomBytes(8 << 20, 53);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint32_t i = 0; !done.load(); ++i) data[(i * 7919) % data.size()] ^= 0x5a;
  });
  for (int round = 0; round < 4; ++round) {
    absl::StatusOr<BlobCache::Stored> stored =
        cache->StoreHashing(data.data(), data.size(), std::nullopt);
    ASSERT_TRUE(stored.ok()) << stored.status();
  }
  done = true;
  writer.join();
  // Every blob on disk hashes to its name (sha256 of the file, not the cache's own Read).
  int blobs = 0;
  for (const fs::path& path : FilesUnder(dir_)) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(DigestHex(Sha256(bytes.data(), bytes.size())), path.filename().string());
    ++blobs;
  }
  EXPECT_GE(blobs, 1);
}

TEST_F(BlobCacheTest, EmptyBlob) {
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  const Sha256Digest digest = Sha256(nullptr, 0);
  ASSERT_TRUE(cache->Store(digest, nullptr, 0).ok());
  auto hit = cache->Read(digest, nullptr, 0);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_TRUE(*hit);
}

TEST_F(BlobCacheTest, MissOnUnknownDigest) {
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  ExpectMiss(*cache, Sha256("nope", 4), 16);
  EXPECT_FALSE(cache->Contains(Sha256("nope", 4)));
}

TEST_F(BlobCacheTest, MissOnSizeMismatch) {
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  const std::vector<uint8_t> blob = RandomBytes(4096, 2);
  ASSERT_TRUE(Store(*cache, blob).ok());
  ExpectMiss(*cache, DigestOf(blob), blob.size() - 1);
  ExpectMiss(*cache, DigestOf(blob), blob.size() + 1);
  // The blob itself is fine and stays.
  ExpectHit(*cache, blob);
}

TEST_F(BlobCacheTest, CorruptFileIsDeletedAndMisses) {
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  const std::vector<uint8_t> blob = RandomBytes(8192, 3);
  const Sha256Digest digest = DigestOf(blob);
  ASSERT_TRUE(cache->Store(digest, blob.data(), blob.size()).ok());
  const std::string path = PathOf(digest);
  {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const uint8_t flipped = blob[1234] ^ 0x01;
    ASSERT_EQ(::pwrite(fd, &flipped, 1, 1234), 1);
    ::close(fd);
  }
  ExpectMiss(*cache, digest, blob.size());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(cache->Contains(digest));
  EXPECT_EQ(cache->blob_count(), 0u);
  EXPECT_EQ(cache->total_bytes(), 0u);
  // It can be stored again.
  ASSERT_TRUE(cache->Store(digest, blob.data(), blob.size()).ok());
  ExpectHit(*cache, blob);
}

TEST_F(BlobCacheTest, TruncatedOrDeletedFileMisses) {
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  const std::vector<uint8_t> a = RandomBytes(1000, 4);
  const std::vector<uint8_t> b = RandomBytes(1000, 5);
  ASSERT_TRUE(Store(*cache, a).ok());
  ASSERT_TRUE(Store(*cache, b).ok());
  fs::resize_file(PathOf(DigestOf(a)), 500);
  fs::remove(PathOf(DigestOf(b)));
  ExpectMiss(*cache, DigestOf(a), a.size());
  ExpectMiss(*cache, DigestOf(b), b.size());
  EXPECT_FALSE(fs::exists(PathOf(DigestOf(a))));
  EXPECT_EQ(cache->blob_count(), 0u);
  EXPECT_EQ(cache->total_bytes(), 0u);
}

// A blob cut short while the server was down: the next Open drops it (its recorded size
// says so), so the next Store puts it back, and it is a hit again.
TEST_F(BlobCacheTest, ReopenDropsABlobCutShortWhileDown) {
  const std::vector<uint8_t> a = RandomBytes(4000, 6);
  const std::vector<uint8_t> b = RandomBytes(4000, 7);
  {
    auto cache = OpenCache(0);
    ASSERT_NE(cache, nullptr);
    ASSERT_TRUE(Store(*cache, a).ok());
    ASSERT_TRUE(Store(*cache, b).ok());
  }
  fs::resize_file(PathOf(DigestOf(a)), 1000);
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  if (fs::exists(PathOf(DigestOf(a)))) GTEST_SKIP() << "no user xattrs on " << dir_;
  EXPECT_FALSE(cache->Contains(DigestOf(a)));
  EXPECT_EQ(cache->blob_count(), 1u);
  EXPECT_EQ(cache->total_bytes(), b.size());
  ExpectHit(*cache, b);
  ASSERT_TRUE(Store(*cache, a).ok());
  ExpectHit(*cache, a);
}

// A blob of the wrong size that Open could not tell (no recorded size: an older version's)
// is never a hit, and the next Store of its bytes replaces it: it used to be "present", so
// every load missed and uploaded it again, forever.
TEST_F(BlobCacheTest, StoreReplacesABlobOfTheWrongSize) {
  const std::vector<uint8_t> a = RandomBytes(4000, 8);
  {
    auto cache = OpenCache(0);
    ASSERT_NE(cache, nullptr);
    ASSERT_TRUE(Store(*cache, a).ok());
  }
  fs::resize_file(PathOf(DigestOf(a)), 1000);
  ::removexattr(PathOf(DigestOf(a)).c_str(), "user.tensorgrid.size");
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->Contains(DigestOf(a)));
  EXPECT_FALSE(cache->ContainsWithSize(DigestOf(a), a.size()));
  ExpectMiss(*cache, DigestOf(a), a.size());
  // A request naming the wrong size removes nothing (sizes come from clients).
  ExpectMiss(*cache, DigestOf(a), 1000);
  ASSERT_TRUE(Store(*cache, a).ok());
  EXPECT_EQ(fs::file_size(PathOf(DigestOf(a))), a.size());
  EXPECT_EQ(cache->total_bytes(), a.size());
  ExpectHit(*cache, a);
}

// A FIFO under a blob's name (put there after the scan) is a miss at once, not an open that
// waits for a writer until the upload's deadline; it is removed, and the blob stored again.
TEST_F(BlobCacheTest, FifoUnderABlobsNameIsAMissNotAStall) {
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  const std::vector<uint8_t> a = RandomBytes(4000, 9);
  ASSERT_TRUE(Store(*cache, a).ok());
  const std::string path = PathOf(DigestOf(a));
  ASSERT_TRUE(fs::remove(path));
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  auto read = std::async(std::launch::async, [&] {
    std::vector<uint8_t> got(a.size());
    return cache->Read(DigestOf(a), got.data(), got.size());
  });
  if (read.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock the open so the test can end: a writer lets it return.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    FAIL() << "Read blocked on a FIFO";
  }
  absl::StatusOr<bool> hit = read.get();
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_FALSE(*hit);
  EXPECT_FALSE(fs::exists(path));
  ASSERT_TRUE(Store(*cache, a).ok());
  ExpectHit(*cache, a);
}

// A FIFO under a blob's name at start-up is not indexed (and the Store of its bytes replaces it).
TEST_F(BlobCacheTest, OpenSkipsAFifoUnderABlobsName) {
  const std::vector<uint8_t> a = RandomBytes(100, 10);
  const std::string hex = DigestHex(DigestOf(a));
  fs::create_directories(absl::StrCat(dir_, "/", hex.substr(0, 2)));
  ASSERT_EQ(::mkfifo(PathOf(DigestOf(a)).c_str(), 0644), 0);
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  EXPECT_FALSE(cache->Contains(DigestOf(a)));
  ASSERT_TRUE(Store(*cache, a).ok());
  ExpectHit(*cache, a);
}

TEST_F(BlobCacheTest, EvictsLeastRecentlyUsed) {
  constexpr size_t kBlob = 1000;
  auto cache = OpenCache(2 * kBlob);
  ASSERT_NE(cache, nullptr);
  const std::vector<std::vector<uint8_t>> blobs = RandomBlobs(4, kBlob, 10);

  ASSERT_TRUE(Store(*cache, blobs[0]).ok());
  ASSERT_TRUE(Store(*cache, blobs[1]).ok());
  // The third evicts the oldest, the first.
  ASSERT_TRUE(Store(*cache, blobs[2]).ok());
  ExpectAbsent(*cache, blobs[0]);
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[1])));
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[2])));

  // Touching the second makes the third the least recently used.
  ExpectHit(*cache, blobs[1]);
  ASSERT_TRUE(Store(*cache, blobs[3]).ok());
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[1])));
  ExpectAbsent(*cache, blobs[2]);
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[3])));
  EXPECT_EQ(cache->blob_count(), 2u);
  EXPECT_EQ(cache->total_bytes(), 2 * kBlob);
  EXPECT_EQ(FilesUnder(dir_).size(), 2u);
}

TEST_F(BlobCacheTest, ReadTouchProtectsFirstBlob) {
  // Full at three blobs; reading the first makes the untouched second the one to go.
  constexpr size_t kBlob = 512;
  auto cache = OpenCache(3 * kBlob);
  ASSERT_NE(cache, nullptr);
  const std::vector<std::vector<uint8_t>> blobs = RandomBlobs(4, kBlob, 20);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Store(*cache, blobs[i]).ok());
  ExpectHit(*cache, blobs[0]);
  ASSERT_TRUE(Store(*cache, blobs[3]).ok());
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[0])));
  ExpectAbsent(*cache, blobs[1]);
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[2])));
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[3])));
  ExpectHit(*cache, blobs[0]);
}

TEST_F(BlobCacheTest, NeverEvictsTheBlobJustWrittenAndSkipsOversized) {
  auto cache = OpenCache(1000);
  ASSERT_NE(cache, nullptr);
  const std::vector<uint8_t> a = RandomBytes(600, 30);
  const std::vector<uint8_t> b = RandomBytes(700, 31);
  const std::vector<uint8_t> huge = RandomBytes(1001, 32);
  ASSERT_TRUE(Store(*cache, a).ok());
  ASSERT_TRUE(Store(*cache, b).ok());
  EXPECT_FALSE(cache->Contains(DigestOf(a)));
  EXPECT_TRUE(cache->Contains(DigestOf(b)));
  // Larger than max_bytes: OK, but not stored, and nothing else is evicted for it.
  ASSERT_TRUE(Store(*cache, huge).ok());
  ExpectAbsent(*cache, huge);
  EXPECT_TRUE(cache->Contains(DigestOf(b)));
  EXPECT_EQ(cache->total_bytes(), b.size());
}

TEST_F(BlobCacheTest, ReopenFindsBlobsAndRemovesTempFiles) {
  const std::vector<uint8_t> a = RandomBytes(3000, 40);
  const std::vector<uint8_t> b = RandomBytes(5000, 41);
  {
    auto cache = OpenCache(0);
    ASSERT_NE(cache, nullptr);
    ASSERT_TRUE(Store(*cache, a).ok());
    ASSERT_TRUE(Store(*cache, b).ok());
  }
  // Leftovers of a write cut short, and an unrelated file that must be left alone.
  const std::string tmp = absl::StrCat(PathOf(DigestOf(a)), ".tmp.123.0");
  std::ofstream(tmp) << "partial";
  const std::string incoming = absl::StrCat(dir_, "/incoming.tmp.123.1");  // StoreHashing's.
  std::ofstream(incoming) << "partial";
  const std::string other = absl::StrCat(dir_, "/README");
  std::ofstream(other) << "not a blob";

  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(incoming));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_EQ(cache->blob_count(), 2u);
  EXPECT_EQ(cache->total_bytes(), a.size() + b.size());
  ExpectHit(*cache, a);
  ExpectHit(*cache, b);
}

TEST_F(BlobCacheTest, ReopenKeepsLruOrderAndEvictsToNewLimit) {
  constexpr size_t kBlob = 256;
  const std::vector<std::vector<uint8_t>> blobs = RandomBlobs(3, kBlob, 50);
  {
    auto cache = OpenCache(0);
    ASSERT_NE(cache, nullptr);
    for (const auto& blob : blobs) ASSERT_TRUE(Store(*cache, blob).ok());
  }
  // Give the files distinct, known ages: blob 1 oldest, then 2, then 0 (as if read last).
  const int order[] = {1, 2, 0};
  for (int rank = 0; rank < 3; ++rank) {
    const struct timespec times[2] = {{1000000 + rank, 0}, {1000000 + rank, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, PathOf(DigestOf(blobs[order[rank]])).c_str(), times, 0), 0);
  }
  auto cache = OpenCache(2 * kBlob);  // A smaller limit: the oldest goes at once.
  ASSERT_NE(cache, nullptr);
  ExpectAbsent(*cache, blobs[1]);
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[2])));
  EXPECT_TRUE(cache->Contains(DigestOf(blobs[0])));
}

TEST_F(BlobCacheTest, ReadIsRememberedAcrossReopen) {
  constexpr size_t kBlob = 256;
  const std::vector<uint8_t> a = RandomBytes(kBlob, 60);
  const std::vector<uint8_t> b = RandomBytes(kBlob, 61);
  {
    auto cache = OpenCache(0);
    ASSERT_NE(cache, nullptr);
    ASSERT_TRUE(Store(*cache, a).ok());
    ASSERT_TRUE(Store(*cache, b).ok());
    // Both written long ago, a before b; then a is read.
    const struct timespec old_a[2] = {{1000000, 0}, {1000000, 0}};
    const struct timespec old_b[2] = {{2000000, 0}, {2000000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, PathOf(DigestOf(a)).c_str(), old_a, 0), 0);
    ASSERT_EQ(::utimensat(AT_FDCWD, PathOf(DigestOf(b)).c_str(), old_b, 0), 0);
    ExpectHit(*cache, a);
  }
  auto cache = OpenCache(kBlob);
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(cache->Contains(DigestOf(a)));
  EXPECT_FALSE(cache->Contains(DigestOf(b)));
}

TEST_F(BlobCacheTest, StoredOrHashedBlobIsServedWithoutHashingUntilItsFileChanges) {
  const std::vector<uint8_t> blob = RandomBytes(200000, 70);
  const Sha256Digest digest = DigestOf(blob);
  {
    auto cache = OpenCache(0);
    ASSERT_NE(cache, nullptr);
    ASSERT_TRUE(cache->Store(digest, blob.data(), blob.size()).ok());
    ExpectHit(*cache, blob);
    ExpectHit(*cache, blob);
    EXPECT_EQ(cache->bytes_hashed(), 0u);  // it wrote the file itself.
  }
  // An earlier run's blob is hashed on its first read only.
  auto cache = OpenCache(0);
  ASSERT_NE(cache, nullptr);
  ExpectHit(*cache, blob);
  EXPECT_EQ(cache->bytes_hashed(), blob.size());
  ExpectHit(*cache, blob);
  EXPECT_EQ(cache->bytes_hashed(), blob.size());

  // One byte changed with the size and mtime put back: the ctime still moved, so the next
  // read hashes, and the corrupt blob is a miss.
  const std::string path = PathOf(digest);
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const uint8_t flipped = blob[777] ^ 0x10;
    ASSERT_EQ(::pwrite(fd, &flipped, 1, 777), 1);
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(::futimens(fd, times), 0);
    ::close(fd);
  }
  ExpectMiss(*cache, digest, blob.size());
  EXPECT_EQ(cache->bytes_hashed(), 2 * blob.size());
  EXPECT_FALSE(cache->Contains(digest));
}

TEST_F(BlobCacheTest, OpenFailsOnAFile) {
  const std::string file = absl::StrCat(root_, "/file");
  std::ofstream(file) << "x";
  auto cache = BlobCache::Open(file, 0);
  EXPECT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find(file), absl::string_view::npos) << cache.status();
  EXPECT_EQ(BlobCache::Open("", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BlobCacheTest, ConcurrentStoresAndReads) {
  constexpr int kThreads = 8;
  constexpr int kBlobs = 24;
  constexpr size_t kBlob = 64 << 10;
  // Room for a third of the blobs, so eviction races with reads and stores.
  auto cache = OpenCache(8 * kBlob);
  ASSERT_NE(cache, nullptr);
  const std::vector<std::vector<uint8_t>> blobs = RandomBlobs(kBlobs, kBlob, 100);

  std::vector<std::string> errors(kThreads);
  std::vector<int> hits(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<uint8_t> got(kBlob);
      for (int iter = 0; iter < 200; ++iter) {
        // Threads share blobs, so the same digest is often stored from several at once.
        const auto& blob = blobs[rng() % kBlobs];
        const Sha256Digest digest = DigestOf(blob);
        if (absl::Status s = cache->Store(digest, blob.data(), blob.size()); !s.ok()) {
          errors[t] = s.ToString();
          return;
        }
        auto hit = cache->Read(digest, got.data(), got.size());
        if (!hit.ok()) {
          errors[t] = hit.status().ToString();
          return;
        }
        if (*hit) {
          ++hits[t];
          if (got != blob) {
            errors[t] = absl::StrCat("corrupt read of ", DigestHex(digest));
            return;
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  int total_hits = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    total_hits += hits[t];
  }
  EXPECT_GT(total_hits, 0);

  // The index matches the directory: no temp files, every indexed blob present and intact.
  EXPECT_LE(cache->total_bytes(), 8 * kBlob);
  const std::vector<fs::path> files = FilesUnder(dir_);
  EXPECT_EQ(files.size(), cache->blob_count());
  EXPECT_EQ(cache->total_bytes(), cache->blob_count() * kBlob);
  for (const auto& blob : blobs) {
    if (cache->Contains(DigestOf(blob))) ExpectHit(*cache, blob);
  }
}

}  // namespace
}  // namespace tg::server
