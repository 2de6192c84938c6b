// ModelIndex: rpc-server's index of the GGUF files under its --model-dir directories, so that
// a client loading a model the server already has on disk sends no weight bytes: the server
// reads each piece from its own file into the session's buffer, after checking that the bytes
// hash to what the client announced. Indexing runs on a thread of its own after the server
// starts (with progress log lines); until it reaches a file, clients that need it upload.
// A file found changed when read (size, mtime, or bytes) stops being used and is indexed
// again in the background. Thread-safe.
#ifndef TENSORGRID_SERVER_MODEL_INDEX_H_
#define TENSORGRID_SERVER_MODEL_INDEX_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/model_identity.h"
#include "server/indexed_model_file.h"
#include "server/model_dir.h"

namespace tg::server {

class Metrics;

struct ModelIndexOptions {
  std::vector<ModelDir> dirs;  // from OpenModelDir.
  std::string cache_dir;       // --cache: piece hashes are kept there; empty: rehash at start.
  int threads = 0;             // hashing threads; 0: one per core.
  Metrics* metrics = nullptr;  // may be null.
};

class ModelIndex {
 public:
  // Starts indexing in the background.
  explicit ModelIndex(ModelIndexOptions options);
  // Stops indexing (a file being hashed is finished first).
  ~ModelIndex();
  ModelIndex(const ModelIndex&) = delete;
  ModelIndex& operator=(const ModelIndex&) = delete;

  // Blocks until the first scan of every directory is indexed (tests, the fuzzer).
  void WaitUntilIndexed() ABSL_LOCKS_EXCLUDED(mu_);

  struct Match {
    uint64_t file = 0;  // id for ReadPiece.
    std::string name;   // relative to its --model-dir.
    uint64_t pieces = 0;
  };
  // The indexed file with this identity, limited to files called `name` when it is not
  // empty (a path relative to a --model-dir, an absolute path inside one, or a file name).
  // PERMISSION_DENIED for a name outside every --model-dir; NOT_FOUND when no indexed file
  // matches (the message says whether indexing is still running).
  absl::StatusOr<Match> Find(absl::string_view name, const rpc::ModelIdentity& identity) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Reads the piece of `size` bytes hashing to `digest` into dst: the one at `offset` of file
  // `file` when that is it, else any indexed piece with that digest. True when dst now holds
  // exactly those bytes (read and hashed just now); false when no indexed file has them or
  // the file changed (it is then indexed again in the background).
  absl::StatusOr<bool> ReadPiece(uint64_t file, uint64_t offset, uint64_t size,
                                 const rpc::Sha256Digest& digest, uint8_t* dst)
      ABSL_LOCKS_EXCLUDED(mu_);

  size_t file_count() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Location {
    uint64_t file = 0;
    size_t piece = 0;
  };

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void IndexOne(const ModelDirFile& file) ABSL_LOCKS_EXCLUDED(mu_);
  // The piece hashing to `digest` with `size` bytes: at `offset` of `file`, else anywhere.
  std::pair<std::shared_ptr<IndexedModelFile>, size_t> Locate(uint64_t file, uint64_t offset,
                                                              uint64_t size,
                                                              const rpc::Sha256Digest& digest) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops a changed file from the lookups and queues its path for indexing again.
  void Retire(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  const ModelIndexOptions options_;
  mutable absl::Mutex mu_;
  // Every file ever indexed, by id (position + 1); retired ones stay (sessions name them).
  std::vector<std::shared_ptr<IndexedModelFile>> files_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> live_ ABSL_GUARDED_BY(mu_);  // ids not retired.
  absl::flat_hash_map<rpc::Sha256Digest, Location> by_digest_ ABSL_GUARDED_BY(mu_);
  std::deque<ModelDirFile> queue_ ABSL_GUARDED_BY(mu_);  // files to index again.
  bool scanned_ ABSL_GUARDED_BY(mu_) = false;            // the first pass is done.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};  // stop_ for the hashing threads, without the lock.
  std::thread thread_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_MODEL_INDEX_H_
