// IndexedModelFile: one GGUF file of rpc-server's --model-dir index: its identity, the SHA-256
// of each of its pieces (proto/model_identity.h), and the read path that serves a piece to a
// client only when the bytes just read hash to the indexed digest. Hashing happens once: the
// hashes are kept in the server's cache directory under the file's path and reused while the
// file keeps its size and mtime. Thread-safe after Build (reads use pread on a descriptor that
// stays open; a file that shrinks or changes makes reads return false, never wrong bytes).
#ifndef TENSORGRID_SERVER_INDEXED_MODEL_FILE_H_
#define TENSORGRID_SERVER_INDEXED_MODEL_FILE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/model_hashes.h"
#include "server/file_state.h"
#include "server/model_dir.h"

namespace tg::server {

class IndexedModelFile {
 public:
  struct BuildOptions {
    std::string cache_dir;  // where hashes are kept (a model-index/ folder in it); empty: not kept.
    int threads = 0;        // hashing threads; 0: one per core.
    // Called from the hashing threads with the bytes just hashed (progress lines).
    std::function<void(uint64_t)> on_hashed;
    // Polled between pieces: true stops hashing (CANCELLED), so a server can shut down in
    // the middle of indexing a large model.
    std::function<bool()> cancelled;
  };

  // Opens the file, reads its tensor table and its piece hashes: from the cache entry when it
  // matches the file (size, mtime, identity, pieces), else by hashing every piece (and storing
  // the entry; a failed store is logged). INVALID_ARGUMENT for a file that is not a readable
  // GGUF file; ABORTED when the file changed while it was hashed.
  static absl::StatusOr<std::unique_ptr<IndexedModelFile>> Build(const ModelDirFile& file,
                                                                 const BuildOptions& options);
  ~IndexedModelFile();
  IndexedModelFile(const IndexedModelFile&) = delete;
  IndexedModelFile& operator=(const IndexedModelFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  const rpc::ModelHashes& hashes() const { return hashes_; }
  bool from_cache() const { return from_cache_; }
  // Bytes of all pieces.
  uint64_t piece_bytes() const { return piece_bytes_; }

  // Reads piece `index` into dst (piece size bytes). True when the bytes are the indexed ones.
  // A piece this process hashed, or already served once after hashing it, is read without
  // hashing while the file is unchanged (FileState: size, mtime, ctime and inode on the
  // descriptor held open since; checked before and after the read): re-hashing what was just
  // indexed was a third of a --model-dir load. A piece whose hash came from the cache entry
  // of an earlier run is hashed on its first serve (the file may have been changed with its
  // mtime put back while no server watched). False when the file no longer has its indexed
  // state, shrank during the read, or its bytes hash differently: the file is then marked
  // stale and every later read returns false. An error only for a failed read system call.
  absl::StatusOr<bool> ReadPiece(size_t index, uint8_t* dst);
  bool stale() const { return stale_.load(); }

 private:
  IndexedModelFile(int fd, ModelDirFile file) : fd_(fd), path_(file.path), name_(file.name) {}
  // Whether the open file still has the indexed state.
  bool Unchanged() const;

  const int fd_;
  const std::string path_;
  const std::string name_;
  rpc::ModelHashes hashes_;
  uint64_t piece_bytes_ = 0;
  bool from_cache_ = false;
  FileState state_;  // when indexed.
  // Per piece: its bytes were hashed by this process while the file had state_.
  std::unique_ptr<std::atomic<bool>[]> verified_;
  std::atomic<bool> stale_{false};
};

// The cache entry of the file at real path `path` under `cache_dir`.
std::string ModelIndexEntryPath(const std::string& cache_dir, const std::string& path);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_INDEXED_MODEL_FILE_H_
