#include "server/model_index.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/log.h"
#include "server/metrics.h"

namespace tg::server {
namespace {

constexpr Logger kLog("rpc-server");
// A progress line at most this often while a large file is hashed.
constexpr absl::Duration kProgressEvery = absl::Seconds(2);

std::string Mb(uint64_t bytes) { return absl::StrFormat("%.1f", bytes / 1e6); }

absl::string_view BaseName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

ModelIndex::ModelIndex(ModelIndexOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

ModelIndex::~ModelIndex() {
  stopping_ = true;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ModelIndex::WaitUntilIndexed() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ModelIndex* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) { return m->scanned_ || m->stop_; },
      this));
}

size_t ModelIndex::file_count() const {
  absl::MutexLock lock(&mu_);
  return live_.size();
}

void ModelIndex::Run() {
  const absl::Time start = absl::Now();
  const std::vector<ModelDirFile> files = ScanModelDirs(options_.dirs);
  kLog.Info("model-dir: indexing in the background; until a file is indexed, clients upload it",
            {{"files", files.size()}, {"cache", options_.cache_dir.empty() ? "off" : "on"}});
  for (const ModelDirFile& f : files) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    IndexOne(f);
  }
  uint64_t pieces = 0, bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    scanned_ = true;
    for (uint64_t id : live_) {
      pieces += files_[id - 1]->hashes().pieces.size();
      bytes += files_[id - 1]->piece_bytes();
    }
  }
  kLog.Info("model-dir: index ready",
            {{"files", file_count()},
             {"pieces", pieces},
             {"mb", Mb(bytes)},
             {"seconds", absl::StrFormat("%.2f", absl::ToDoubleSeconds(absl::Now() - start))}});
  for (;;) {
    ModelDirFile next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ModelIndex* m)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu_) { return m->stop_ || !m->queue_.empty(); },
          this));
      if (stop_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    IndexOne(next);
  }
}

void ModelIndex::IndexOne(const ModelDirFile& file) {
  const absl::Time start = absl::Now();
  std::atomic<uint64_t> hashed{0};
  absl::Mutex progress_mu;
  absl::Time last_line = start;
  IndexedModelFile::BuildOptions build;
  build.cache_dir = options_.cache_dir;
  build.threads = options_.threads;
  build.cancelled = [this] { return stopping_.load(); };
  build.on_hashed = [&](uint64_t n) {
    const uint64_t done = hashed += n;
    absl::MutexLock lock(&progress_mu);
    const absl::Time now = absl::Now();
    if (now - last_line < kProgressEvery) return;
    last_line = now;
    kLog.Info("model-dir: hashing", {{"file", file.name},
                                     {"mb", Mb(done)},
                                     {"mb_per_s", Mb(done / absl::ToDoubleSeconds(now - start))}});
  };
  absl::StatusOr<std::unique_ptr<IndexedModelFile>> built = IndexedModelFile::Build(file, build);
  if (!built.ok()) {
    if (!absl::IsCancelled(built.status())) {
      kLog.Warn("model-dir: not indexed",
                {{"file", file.path}, {"error", built.status().message()}});
    }
    return;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  kLog.Info("model-dir: indexed", {{"file", file.name},
                                   {"pieces", (*built)->hashes().pieces.size()},
                                   {"mb", Mb((*built)->piece_bytes())},
                                   {"hashes", (*built)->from_cache() ? "kept" : "computed"},
                                   {"seconds", absl::StrFormat("%.2f", seconds)}});
  absl::MutexLock lock(&mu_);
  std::shared_ptr<IndexedModelFile> f = *std::move(built);
  const uint64_t id = files_.size() + 1;
  for (size_t i = 0; i < f->hashes().pieces.size(); ++i) {
    by_digest_.try_emplace(f->hashes().pieces[i].digest, Location{id, i});
  }
  files_.push_back(std::move(f));
  live_.insert(id);
  if (options_.metrics != nullptr) options_.metrics->SetModelDirFiles(live_.size());
}

absl::StatusOr<ModelIndex::Match> ModelIndex::Find(absl::string_view name,
                                                   const rpc::ModelIdentity& identity) const {
  std::string relative;
  if (!name.empty()) {
    absl::StatusOr<std::string> checked = CheckClientName(name, options_.dirs);
    if (!checked.ok()) return checked.status();
    relative = *std::move(checked);
  }
  auto named = [&](const IndexedModelFile& f) {
    return relative.empty() || f.name() == relative ||
           (!absl::StrContains(relative, '/') && BaseName(f.name()) == relative);
  };
  absl::MutexLock lock(&mu_);
  bool name_seen = false;
  for (uint64_t id = 1; id <= files_.size(); ++id) {
    const IndexedModelFile& f = *files_[id - 1];
    if (!live_.contains(id) || !named(f)) continue;
    name_seen = true;
    if (f.hashes().identity == identity) return Match{id, f.name(), f.hashes().pieces.size()};
  }
  const std::string still = scanned_ ? "" : " (indexing is still running)";
  if (relative.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no file with this model's identity under --model-dir", still));
  }
  return absl::NotFoundError(absl::StrCat(
      name_seen ? "the indexed file '" : "no indexed file '", relative,
      name_seen ? "' under --model-dir is another version of the model" : "' under --model-dir",
      still));
}

std::pair<std::shared_ptr<IndexedModelFile>, size_t> ModelIndex::Locate(
    uint64_t file, uint64_t offset, uint64_t size, const rpc::Sha256Digest& digest) const {
  absl::MutexLock lock(&mu_);
  if (live_.contains(file)) {
    const std::shared_ptr<IndexedModelFile>& f = files_[file - 1];
    const std::vector<rpc::PieceHash>& pieces = f->hashes().pieces;
    auto it = std::lower_bound(
        pieces.begin(), pieces.end(), offset,
        [](const rpc::PieceHash& p, uint64_t off) { return p.range.offset < off; });
    if (it != pieces.end() && it->range.offset == offset && it->range.size == size &&
        it->digest == digest) {
      return {f, static_cast<size_t>(it - pieces.begin())};
    }
  }
  auto it = by_digest_.find(digest);
  if (it == by_digest_.end()) return {nullptr, 0};
  const std::shared_ptr<IndexedModelFile>& f = files_[it->second.file - 1];
  if (f->hashes().pieces[it->second.piece].range.size != size) return {nullptr, 0};
  return {f, it->second.piece};
}

absl::StatusOr<bool> ModelIndex::ReadPiece(uint64_t file, uint64_t offset, uint64_t size,
                                           const rpc::Sha256Digest& digest, uint8_t* dst) {
  auto [f, piece] = Locate(file, offset, size, digest);
  if (f == nullptr) return false;
  absl::StatusOr<bool> read = f->ReadPiece(piece, dst);
  if (read.ok() && *read) return true;
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t i = 1; i <= files_.size() && id == 0; ++i) id = files_[i - 1] == f ? i : 0;
  }
  Retire(id);
  return read;
}

void ModelIndex::Retire(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (!live_.erase(id)) return;
  const std::shared_ptr<IndexedModelFile>& f = files_[id - 1];
  kLog.Warn("model-dir: file changed on disk; not used until it is indexed again",
            {{"file", f->path()}});
  for (const rpc::PieceHash& p : f->hashes().pieces) {
    auto it = by_digest_.find(p.digest);
    if (it != by_digest_.end() && it->second.file == id) by_digest_.erase(it);
  }
  for (uint64_t other : live_) {  // another copy may hold the same pieces.
    const std::vector<rpc::PieceHash>& pieces = files_[other - 1]->hashes().pieces;
    for (size_t i = 0; i < pieces.size(); ++i) {
      by_digest_.try_emplace(pieces[i].digest, Location{other, i});
    }
  }
  if (!stop_) queue_.push_back({f->path(), f->name()});
  if (options_.metrics != nullptr) options_.metrics->SetModelDirFiles(live_.size());
}

}  // namespace tg::server
