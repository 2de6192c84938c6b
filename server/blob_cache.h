// BlobCache: rpc-server's content-addressed weight cache on disk (--cache DIR). A blob is
// named by the SHA-256 of its bytes, so a restarted server (or another client) reuses weights
// without receiving them again. Thread-safe; one DIR belongs to one server process.
#ifndef TENSORGRID_SERVER_BLOB_CACHE_H_
#define TENSORGRID_SERVER_BLOB_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/content_hash.h"
#include "server/file_state.h"

namespace tg::server {

// Layout: DIR/ab/<64 hex digits>, "ab" being the first two digits (keeps directories small).
// Writes go to DIR/ab/<hex>.tmp.<unique> and are renamed into place, so a crash of the
// server leaves either the whole blob or a temp file that the next Open removes. They are not
// fsync'ed: a crash of the machine may leave a blob cut short or empty, which its first read
// after the restart (always hashed) finds and removes, a miss; a blob records its size in an
// extended attribute (where the file system has them), so that Open drops one whose file no
// longer has that size. A blob that turns out wrong (a failed hash, a wrong size, a FIFO or
// other non-regular file under its name) is a miss and is replaced by the next Store of its
// bytes; files are opened without blocking (O_NONBLOCK). The least recently
// used blobs are evicted above max_bytes; a blob's mtime records its last use, so the LRU
// order survives a restart.
class BlobCache {
 public:
  // Creates DIR if needed, scans existing blobs (their sizes and mtimes give the LRU order),
  // removes stale temp files and blobs whose size is not the one they recorded, evicts down
  // to max_bytes. max_bytes 0 = unlimited.
  static absl::StatusOr<std::unique_ptr<BlobCache>> Open(std::string dir, uint64_t max_bytes);

  BlobCache(const BlobCache&) = delete;
  BlobCache& operator=(const BlobCache&) = delete;

  // Copies the blob into dst when present with exactly `size` bytes AND its content still
  // hashes to `digest` (a corrupt file is deleted and reported as absent). Returns true on a
  // hit and marks the blob recently used; false on a miss, leaving dst's content unspecified.
  // An error only for I/O failures other than the file being gone.
  // The bytes are hashed as they are read unless this process wrote the blob or hashed it
  // since, and the file still has the state it had then (FileState, checked before and after
  // the read) and was marked used less than an hour ago (kTouchInterval): re-hashing every blob it
  // serves was a third of a warm load. A blob from an earlier run is hashed on its first read.
  absl::StatusOr<bool> Read(const rpc::Sha256Digest& digest, void* dst, size_t size)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Stores bytes that hash to digest, atomically (see above), then evicts least-recently-used
  // blobs while the total exceeds max_bytes (never the one just written): StoreHashing with
  // `digest` expected. Bytes that hash otherwise are DATA_LOSS and not stored. A blob already
  // present is just marked used. A blob larger than max_bytes is not stored (OK status).
  // Concurrent stores of the same digest are safe.
  absl::Status Store(const rpc::Sha256Digest& digest, const void* data, size_t size)
      ABSL_LOCKS_EXCLUDED(mu_);

  // What StoreHashing did: the bytes' digest, and why they were not stored, if they were not
  // (an I/O error; OK when stored, already present, over max_bytes or not `expect`ed).
  struct Stored {
    rpc::Sha256Digest digest;
    absl::Status store_error;
  };
  // Stores bytes that may change while it runs (a buffer other streams can write): each block
  // is copied to private memory, hashed and written from there, so the blob always holds
  // what its name says, whatever `data` held before or after. With `expect`, bytes that hash
  // otherwise are not stored (the caller compares the digest). Evicts as Store does. An error
  // only when hashing itself failed (out of memory).
  absl::StatusOr<Stored> StoreHashing(const void* data, size_t size,
                                      const std::optional<rpc::Sha256Digest>& expect)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the index holds the blob (Read still verifies it).
  bool Contains(const rpc::Sha256Digest& digest) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether it holds the blob with exactly `size` bytes.
  bool ContainsWithSize(const rpc::Sha256Digest& digest, uint64_t size) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sum of the sizes of the indexed blobs.
  uint64_t total_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t blob_count() const ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes Read hashed to verify them (load reports and tests: a warm read hashes nothing).
  uint64_t bytes_hashed() const { return bytes_hashed_.load(); }
  const std::string& dir() const { return dir_; }

 private:
  struct Entry {
    uint64_t size = 0;
    std::list<rpc::Sha256Digest>::iterator lru_pos;  // Into lru_.
    // The file's state when this process last wrote or hashed it (and set its mtime).
    std::optional<FileState> verified;
  };

  BlobCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}

  std::string BlobPath(const rpc::Sha256Digest& digest) const;
  // Scans DIR into the index (Open only).
  absl::Status Scan() ABSL_LOCKS_EXCLUDED(mu_);
  // Adds a blob as the most recently used one.
  void InsertLocked(const rpc::Sha256Digest& digest, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a blob from the index and unlinks its file.
  absl::Status RemoveLocked(const rpc::Sha256Digest& digest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `digest` from the index when the file at its path is gone, or is the inode
  // (dev, ino) that Read found corrupt (unlinking it). A file renamed in since is kept.
  void DropIfStaleLocked(const rpc::Sha256Digest& digest, bool corrupt, uint64_t dev, uint64_t ino)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts least recently used blobs, except `keep` (may be null), down to max_bytes_.
  absl::Status EvictLocked(const rpc::Sha256Digest* keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the blob used (LRU order, mtime) when the index holds it.
  void MarkUsedIfPresent(const rpc::Sha256Digest& digest) ABSL_LOCKS_EXCLUDED(mu_);
  // Creates a temp file in DIR itself, for bytes whose digest is not known yet.
  absl::StatusOr<std::pair<std::string, int>> OpenIncoming() const;
  // Moves a fully written temp file (its descriptor `fd` still open; closed here) into place
  // as the blob `digest`, indexes it as verified and evicts; a blob already there wins.
  absl::Status Publish(const std::string& tmp, int fd, const rpc::Sha256Digest& digest,
                       uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  // The blob's file state when Read may serve it without hashing, else nullopt.
  std::optional<FileState> TrustedState(const rpc::Sha256Digest& digest) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records (or, with nullopt, forgets) the state of a blob this process verified.
  void SetVerified(const rpc::Sha256Digest& digest, std::optional<FileState> state)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the blob from `fd` into dst: without hashing when the file has the `trusted` state
  // before and after the read; else marks it used (mtime), hashes it as it reads and records
  // the state it had. True when the bytes are the blob's.
  absl::StatusOr<bool> ReadVerified(const rpc::Sha256Digest& digest, int fd, uint8_t* dst,
                                    size_t size, const std::optional<FileState>& trusted,
                                    const std::string& path);

  const std::string dir_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<rpc::Sha256Digest, Entry> index_ ABSL_GUARDED_BY(mu_);
  std::list<rpc::Sha256Digest> lru_ ABSL_GUARDED_BY(mu_);  // Front: most recently used.
  uint64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> bytes_hashed_{0};
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_BLOB_CACHE_H_
