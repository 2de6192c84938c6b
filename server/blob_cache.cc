#include "server/blob_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/status_macros.h"
#include "server/hashed_read.h"
#include "server/log.h"

namespace tg::server {
namespace {

namespace fs = std::filesystem;

// Blobs live in DIR/<first kFanoutDigits hex digits>/ so that no directory holds millions.
constexpr size_t kFanoutDigits = 2;
// Marks an unfinished write: DIR/incoming.tmp.<pid>.<counter> (StoreHashing), or, from
// earlier versions, DIR/ab/<hex>.tmp.<pid>.<counter>.
constexpr char kTempMarker[] = ".tmp.";
// StoreHashing copies, hashes and writes this much at a time (stays in the L2 cache).
constexpr size_t kStoreBlockBytes = size_t{1} << 20;
// Extended attribute holding a blob's size in decimal, written with it: Scan drops a blob
// whose file no longer has it (cut short while the server was down). Best effort: a file
// system without user xattrs, or a blob of an older version, is checked on its first read.
constexpr char kSizeXattr[] = "user.tensorgrid.size";

// The size a blob's xattr records, or nullopt when it has none (or an unreadable one).
std::optional<uint64_t> RecordedSize(const std::string& path) {
  char text[24];
  const ssize_t n = ::getxattr(path.c_str(), kSizeXattr, text, sizeof(text) - 1);
  if (n <= 0) return std::nullopt;
  uint64_t size = 0;
  if (!absl::SimpleAtoi(absl::string_view(text, static_cast<size_t>(n)), &size)) {
    return std::nullopt;
  }
  return size;
}

absl::Status ErrnoError(int err, absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat("blob cache: ", what, " ", path));
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  // Hands the descriptor over without closing it.
  int Release() { return std::exchange(fd_, -1); }
  // Closes now, reporting the error (a deferred write error can surface here).
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

bool IsLowerHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

int HexValue(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

// The digest named by a blob's file name, or nullopt for any other name.
std::optional<rpc::Sha256Digest> ParseBlobName(absl::string_view name) {
  if (name.size() != 2 * rpc::kSha256Bytes || !IsLowerHex(name)) return std::nullopt;
  rpc::Sha256Digest digest;
  for (size_t i = 0; i < rpc::kSha256Bytes; ++i) {
    digest[i] = static_cast<uint8_t>(HexValue(name[2 * i]) << 4 | HexValue(name[2 * i + 1]));
  }
  return digest;
}

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot write", path);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// A blob read without hashing still has its mtime set (a hashed read) this often, so that
// the LRU order survives a restart to within this interval.
constexpr absl::Duration kTouchInterval = absl::Hours(1);

absl::Status Annotate(const absl::Status& status, const std::string& path) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

// A blob found by Scan.
struct ScannedBlob {
  struct timespec mtime;
  rpc::Sha256Digest digest;
  uint64_t size;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BlobCache>> BlobCache::Open(std::string dir, uint64_t max_bytes) {
  if (dir.empty()) return absl::InvalidArgumentError("blob cache: empty directory name");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::ErrnoToStatus(ec.value(),
                               absl::StrCat("blob cache: cannot create directory ", dir));
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("blob cache: ", dir, " exists and is not a directory"));
  }
  auto cache = absl::WrapUnique(new BlobCache(std::move(dir), max_bytes));
  TG_RETURN_IF_ERROR(cache->Scan());
  kServerLog.Info("cache opened", {{"dir", cache->dir()},
                                   {"blobs", cache->blob_count()},
                                   {"bytes", cache->total_bytes()},
                                   {"max_bytes", max_bytes}});
  return cache;
}

absl::Status BlobCache::Scan() {
  std::vector<ScannedBlob> blobs;
  std::error_code ec;
  for (fs::directory_iterator top(dir_, ec), end; !ec && top != end; top.increment(ec)) {
    const std::string sub_name = top->path().filename().string();
    std::error_code type_ec;
    if (sub_name.find(kTempMarker) != std::string::npos && top->is_regular_file(type_ec)) {
      // A write cut short by a crash.
      const std::string path = top->path().string();
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return ErrnoError(errno, "cannot remove stale temp file", path);
      }
      continue;
    }
    if (sub_name.size() != kFanoutDigits || !IsLowerHex(sub_name) || !top->is_directory(type_ec)) {
      continue;
    }
    std::error_code sub_ec;
    for (fs::directory_iterator it(top->path(), sub_ec); !sub_ec && it != end;
         it.increment(sub_ec)) {
      const std::string name = it->path().filename().string();
      const std::string path = it->path().string();
      if (name.find(kTempMarker) != std::string::npos) {
        // A write cut short by a crash; one DIR belongs to one process, so it is stale.
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
          return ErrnoError(errno, "cannot remove stale temp file", path);
        }
        continue;
      }
      std::optional<rpc::Sha256Digest> digest = ParseBlobName(name);
      if (!digest || name.compare(0, kFanoutDigits, sub_name) != 0) continue;
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) return ErrnoError(errno, "cannot stat", path);
      if (!S_ISREG(st.st_mode)) continue;  // a FIFO or a device under a blob's name.
      const std::optional<uint64_t> recorded = RecordedSize(path);
      if (recorded.has_value() && *recorded != static_cast<uint64_t>(st.st_size)) {
        // Cut short (or grown) while the server was down: it can only be a miss. Dropped
        // now, so the next upload of the bytes stores them again.
        kServerLog.Warn("cache blob has the wrong size, removed",
                        {{"path", path}, {"bytes", st.st_size}, {"expected_bytes", *recorded}});
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
          return ErrnoError(errno, "cannot remove", path);
        }
        continue;
      }
      blobs.push_back({st.st_mtim, *digest, static_cast<uint64_t>(st.st_size)});
    }
    if (sub_ec) {
      return absl::ErrnoToStatus(sub_ec.value(),
                                 absl::StrCat("blob cache: cannot list ", top->path().string()));
    }
  }
  if (ec) return absl::ErrnoToStatus(ec.value(), absl::StrCat("blob cache: cannot list ", dir_));

  // Oldest first, so that the newest ends up at the front of the LRU list.
  std::sort(blobs.begin(), blobs.end(), [](const ScannedBlob& a, const ScannedBlob& b) {
    return std::tie(a.mtime.tv_sec, a.mtime.tv_nsec, a.digest) <
           std::tie(b.mtime.tv_sec, b.mtime.tv_nsec, b.digest);
  });
  absl::MutexLock lock(&mu_);
  for (const ScannedBlob& blob : blobs) InsertLocked(blob.digest, blob.size);
  return EvictLocked(nullptr);
}

std::string BlobCache::BlobPath(const rpc::Sha256Digest& digest) const {
  const std::string hex = rpc::DigestHex(digest);
  return absl::StrCat(dir_, "/", absl::string_view(hex).substr(0, kFanoutDigits), "/", hex);
}

void BlobCache::InsertLocked(const rpc::Sha256Digest& digest, uint64_t size) {
  lru_.push_front(digest);
  index_[digest] = Entry{size, lru_.begin()};
  total_bytes_ += size;
}

absl::Status BlobCache::RemoveLocked(const rpc::Sha256Digest& digest) {
  auto it = index_.find(digest);
  if (it == index_.end()) return absl::OkStatus();
  total_bytes_ -= it->second.size;
  lru_.erase(it->second.lru_pos);
  index_.erase(it);
  const std::string path = BlobPath(digest);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError(errno, "cannot remove", path);
  }
  return absl::OkStatus();
}

void BlobCache::DropIfStaleLocked(const rpc::Sha256Digest& digest, bool corrupt, uint64_t dev,
                                  uint64_t ino) {
  if (!index_.contains(digest)) return;
  const std::string path = BlobPath(digest);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    // Deleted behind our back: forget it (RemoveLocked ignores the missing file).
    if (errno == ENOENT) RemoveLocked(digest).IgnoreError();
    return;
  }
  // Only the file Read found corrupt goes; one stored again since then is good.
  if (corrupt && static_cast<uint64_t>(st.st_dev) == dev &&
      static_cast<uint64_t>(st.st_ino) == ino) {
    // A failed unlink leaves the file unindexed; the next Open finds and re-verifies it.
    kServerLog.Warn("cache blob corrupt, removed", {{"path", path}});
    RemoveLocked(digest).IgnoreError();
  }
}

absl::Status BlobCache::EvictLocked(const rpc::Sha256Digest* keep) {
  absl::Status first_error;
  while (max_bytes_ != 0 && total_bytes_ > max_bytes_ && !lru_.empty()) {
    auto victim = std::prev(lru_.end());
    if (keep != nullptr && *victim == *keep) {
      if (victim == lru_.begin()) break;
      victim = std::prev(victim);
    }
    const rpc::Sha256Digest digest = *victim;  // RemoveLocked erases the list node.
    if (LogEnabled(LogLevel::kDebug)) {
      kServerLog.Debug("cache evicted", {{"digest", rpc::DigestHex(digest)},
                                         {"bytes", index_.at(digest).size},
                                         {"total_bytes", total_bytes_},
                                         {"max_bytes", max_bytes_}});
    }
    absl::Status status = RemoveLocked(digest);
    if (first_error.ok()) first_error = std::move(status);
  }
  return first_error;
}

std::optional<FileState> BlobCache::TrustedState(const rpc::Sha256Digest& digest) const {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(digest);
  if (it == index_.end() || !it->second.verified.has_value()) return std::nullopt;
  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  if (now_ns - it->second.verified->mtime_ns > absl::ToInt64Nanoseconds(kTouchInterval)) {
    return std::nullopt;  // time to mark it used on disk again, which takes a hashed read.
  }
  return it->second.verified;
}

void BlobCache::SetVerified(const rpc::Sha256Digest& digest, std::optional<FileState> state) {
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(digest); it != index_.end()) it->second.verified = state;
}

absl::StatusOr<bool> BlobCache::ReadVerified(const rpc::Sha256Digest& digest, int fd, uint8_t* dst,
                                             size_t size, const std::optional<FileState>& trusted,
                                             const std::string& path) {
  if (trusted.has_value() && FileStateOf(fd) == trusted) {
    absl::StatusOr<bool> full = ReadFully(fd, dst, size, 0);
    if (!full.ok()) return Annotate(full.status(), path);
    // A change during the read makes what was read suspect: hash it below.
    if (*full && FileStateOf(fd) == trusted) return true;
  }
  SetVerified(digest, std::nullopt);
  // Marks the use first, so that the state taken next already holds the new mtime: any
  // change after it shows in the state after the read.
  ::futimens(fd, nullptr);  // best effort: the LRU order after a restart.
  const std::optional<FileState> before = FileStateOf(fd);
  absl::StatusOr<std::optional<rpc::Sha256Digest>> got = HashedRead(fd, 0, size, dst, nullptr);
  if (!got.ok()) return Annotate(got.status(), path);
  bytes_hashed_ += size;
  if (!got->has_value() || **got != digest) return false;
  if (before.has_value() && FileStateOf(fd) == before) SetVerified(digest, before);
  return true;
}

absl::StatusOr<bool> BlobCache::Read(const rpc::Sha256Digest& digest, void* dst, size_t size) {
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(digest);
    if (it == index_.end() || it->second.size != size) return false;
    lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
  }
  const std::optional<FileState> trusted = TrustedState(digest);
  // The file I/O runs unlocked: an eviction meanwhile either unlinks the file before open
  // (a miss) or after (the open descriptor still reads the whole blob).
  const std::string path = BlobPath(digest);
  // O_NONBLOCK: a FIFO put under the blob's name must not block the open until a writer
  // comes (the upload would wait for its deadline); it is no regular file, so it goes below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err != ENOENT) return ErrnoError(err, "cannot open", path);
    absl::MutexLock lock(&mu_);
    DropIfStaleLocked(digest, /*corrupt=*/false, 0, 0);
    return false;
  }
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, "cannot stat", path);
  bool intact = S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == size;
  if (intact) {
    TG_ASSIGN_OR_RETURN(intact,
                        ReadVerified(digest, fd, static_cast<uint8_t*>(dst), size, trusted, path));
  }
  if (!intact) {
    absl::MutexLock lock(&mu_);
    DropIfStaleLocked(digest, /*corrupt=*/true, st.st_dev, st.st_ino);
    return false;
  }
  return true;
}

void BlobCache::MarkUsedIfPresent(const rpc::Sha256Digest& digest) {
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(digest);
    if (it == index_.end()) return;
    lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
  }
  ::utimensat(AT_FDCWD, BlobPath(digest).c_str(), nullptr, 0);  // Best effort, as in Read.
}

absl::Status BlobCache::Store(const rpc::Sha256Digest& digest, const void* data, size_t size) {
  TG_ASSIGN_OR_RETURN(const Stored stored, StoreHashing(data, size, digest));
  if (stored.digest != digest) {
    return absl::DataLossError(absl::StrCat("blob cache: bytes hash to ",
                                            rpc::DigestHex(stored.digest), ", not to ",
                                            rpc::DigestHex(digest), "; not stored"));
  }
  return stored.store_error;
}

absl::StatusOr<std::pair<std::string, int>> BlobCache::OpenIncoming() const {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(dir_, "/incoming", kTempMarker, ::getpid(), ".", counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create", tmp);
  return std::make_pair(tmp, fd);
}

absl::StatusOr<BlobCache::Stored> BlobCache::StoreHashing(
    const void* data, size_t size, const std::optional<rpc::Sha256Digest>& expect) {
  Stored stored;
  std::string tmp;
  int fd = -1;
  // Present with this size: then it is only marked used. A blob of another size under the
  // digest is wrong (cut short; these bytes hash to its name): it is replaced (Publish).
  const bool present = expect.has_value() && ContainsWithSize(*expect, size);
  if ((max_bytes_ == 0 || size <= max_bytes_) && !present) {
    absl::StatusOr<std::pair<std::string, int>> opened = OpenIncoming();
    if (opened.ok()) {
      std::tie(tmp, fd) = *opened;
    } else {
      stored.store_error = opened.status();
    }
  }
  // The slow part (the write) runs unlocked; the rename and the index update are done
  // together under the lock (Publish), so the index always matches the directory. No fsync:
  // it made a load that fills the cache as slow as the disk (620 MB in 3.4 s on the
  // benchmark host), and a blob cut short by a crash of the machine costs nothing but a
  // miss, since a blob from an earlier run is hashed on its first read (see Read).
  FdCloser closer(fd);
  rpc::Sha256Stream hasher;
  const auto* from = static_cast<const uint8_t*>(data);
  std::vector<uint8_t> block(std::min(size, kStoreBlockBytes));
  for (size_t at = 0; at < size;) {
    const size_t n = std::min(block.size(), size - at);
    std::memcpy(block.data(), from + at, n);
    hasher.Update(block.data(), n);
    if (fd >= 0 && stored.store_error.ok()) stored.store_error = WriteAll(fd, block.data(), n, tmp);
    at += n;
  }
  const std::optional<rpc::Sha256Digest> digest = hasher.Final();
  const bool keep = digest.has_value() && (!expect.has_value() || *digest == *expect) && fd >= 0 &&
                    stored.store_error.ok();
  if (!keep && !tmp.empty()) ::unlink(tmp.c_str());
  if (!digest.has_value()) return absl::ResourceExhaustedError("blob cache: SHA-256 failed");
  stored.digest = *digest;
  if (present && *digest == *expect) MarkUsedIfPresent(*digest);
  if (keep) stored.store_error = Publish(tmp, closer.Release(), *digest, size);
  return stored;
}

absl::Status BlobCache::Publish(const std::string& tmp, int fd, const rpc::Sha256Digest& digest,
                                uint64_t size) {
  FdCloser closer(fd);
  const std::string path = BlobPath(digest);
  const std::string sub_dir = path.substr(0, path.rfind('/'));
  if (::mkdir(sub_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError(err, "cannot create directory", sub_dir);
  }
  // Best effort (see kSizeXattr): lets the next Open find the blob cut short.
  const std::string size_text = absl::StrCat(size);
  ::fsetxattr(fd, kSizeXattr, size_text.data(), size_text.size(), 0);
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(digest); it != index_.end()) {
    if (it->second.size == size) {  // Another writer won the race.
      lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
      ::unlink(tmp.c_str());
      return absl::OkStatus();
    }
    // The indexed file cannot hold the bytes of its name (they are `size` long, these
    // hashed as they were written): replace it. The rename below replaces the file itself.
    total_bytes_ -= it->second.size;
    lru_.erase(it->second.lru_pos);
    index_.erase(it);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError(err, absl::StrCat("cannot rename ", tmp, " to"), path);
  }
  InsertLocked(digest, size);
  // These are the bytes StoreHashing hashed as it wrote them: the next Read need not hash them
  // while the file keeps the state it has now that it is in place (a rename moves ctime).
  index_.at(digest).verified = FileStateOf(fd);
  if (closer.Close() != 0) {
    const int err = errno;
    RemoveLocked(digest).IgnoreError();  // a deferred write error: the bytes may not be there.
    return ErrnoError(err, "cannot close", path);
  }
  return EvictLocked(&digest);
}

bool BlobCache::Contains(const rpc::Sha256Digest& digest) const {
  absl::MutexLock lock(&mu_);
  return index_.contains(digest);
}

bool BlobCache::ContainsWithSize(const rpc::Sha256Digest& digest, uint64_t size) const {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(digest);
  return it != index_.end() && it->second.size == size;
}

uint64_t BlobCache::total_bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

size_t BlobCache::blob_count() const {
  absl::MutexLock lock(&mu_);
  return index_.size();
}

}  // namespace tg::server
