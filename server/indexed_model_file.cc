#include "server/indexed_model_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gguf/gguf_tensor_extents.h"
#include "proto/parallel_hash.h"
#include "server/hashed_read.h"
#include "server/log.h"

namespace tg::server {
namespace {

constexpr Logger kLog("rpc-server");
constexpr char kIndexFolder[] = "model-index";

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// The descriptor must name the file we resolved: a path component swapped for a symlink
// between the scan and the open would otherwise lead outside the --model-dir.
bool OpenedWhatWeMeant(int fd, const std::string& path) {
  char buf[PATH_MAX];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = readlink(link.c_str(), buf, sizeof(buf) - 1);
  return n > 0 && std::string(buf, static_cast<size_t>(n)) == path;
}

}  // namespace

std::string ModelIndexEntryPath(const std::string& cache_dir, const std::string& path) {
  return absl::StrCat(cache_dir, "/", kIndexFolder, "/",
                      rpc::DigestHex(rpc::Sha256(path.data(), path.size())), ".tghash");
}

IndexedModelFile::~IndexedModelFile() { close(fd_); }

absl::StatusOr<std::unique_ptr<IndexedModelFile>> IndexedModelFile::Build(
    const ModelDirFile& file, const BuildOptions& options) {
  const int fd = open(file.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open: ", std::strerror(errno)));
  }
  std::unique_ptr<IndexedModelFile> f(new IndexedModelFile(fd, file));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !OpenedWhatWeMeant(fd, file.path)) {
    return absl::InvalidArgumentError("not the regular file the directory listing showed");
  }
  f->hashes_.identity.size = static_cast<uint64_t>(st.st_size);
  f->hashes_.mtime_ns = MtimeNs(st);
  std::optional<FileState> state = FileStateOf(fd);
  if (!state.has_value()) return absl::InvalidArgumentError("cannot stat the opened file");
  f->state_ = *state;
  // The one GGUF parser (gguf/), reading with pread: a file that shrinks is an error, not a
  // SIGBUS. Tensors of a type tensorgrid does not know are left out.
  TG_ASSIGN_OR_RETURN(const GgufTensorExtents table,
                      ReadGgufTensorExtents(fd, f->hashes_.identity.size, file.name));
  std::vector<rpc::FileRange> tensors;
  tensors.reserve(table.tensors.size());
  for (const GgufExtent& t : table.tensors) tensors.push_back({t.offset, t.size});
  std::string scratch;
  TG_ASSIGN_OR_RETURN(std::optional<rpc::Sha256Digest> header,
                      HashedRead(fd, 0, table.data_start, nullptr, &scratch));
  if (!header.has_value()) return absl::AbortedError("the file shrank while it was indexed");
  f->hashes_.identity.header = *header;
  const std::vector<rpc::FileRange> pieces = rpc::SplitIntoPieces(tensors);
  for (const rpc::FileRange& p : pieces) f->piece_bytes_ += p.size;

  const std::string entry =
      options.cache_dir.empty() ? "" : ModelIndexEntryPath(options.cache_dir, file.path);
  if (!entry.empty()) {
    absl::StatusOr<rpc::ModelHashes> cached = rpc::ReadModelHashes(entry);
    if (cached.ok() &&
        rpc::CheckModelHashes(*cached, f->hashes_.identity, f->hashes_.mtime_ns, pieces).ok()) {
      f->hashes_.pieces = std::move(cached->pieces);
      f->from_cache_ = true;
      f->verified_ = std::make_unique<std::atomic<bool>[]>(f->hashes_.pieces.size());
      return f;
    }
  }
  f->hashes_.pieces.resize(pieces.size());
  TG_RETURN_IF_ERROR(rpc::ParallelForEach(pieces.size(), options.threads, [&](size_t i) {
    if (options.cancelled && options.cancelled()) return absl::CancelledError("shutting down");
    thread_local std::string slice;
    TG_ASSIGN_OR_RETURN(std::optional<rpc::Sha256Digest> d,
                        HashedRead(fd, pieces[i].offset, pieces[i].size, nullptr, &slice));
    if (!d.has_value()) return absl::AbortedError("the file shrank while it was hashed");
    f->hashes_.pieces[i] = {pieces[i], *d};
    if (options.on_hashed) options.on_hashed(pieces[i].size);
    return absl::OkStatus();
  }));
  if (!f->Unchanged()) return absl::AbortedError("the file changed while it was hashed");
  f->verified_ = std::make_unique<std::atomic<bool>[]>(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) f->verified_[i] = true;
  if (!entry.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(entry).parent_path(), ec);
    if (absl::Status s = rpc::WriteModelHashes(entry, f->hashes_); !s.ok()) {
      kLog.Warn("model-dir: cannot keep the hashes; the next start hashes again",
                {{"file", file.path}, {"error", s.message()}});
    }
  }
  return f;
}

bool IndexedModelFile::Unchanged() const { return FileStateOf(fd_) == state_; }

absl::StatusOr<bool> IndexedModelFile::ReadPiece(size_t index, uint8_t* dst) {
  if (stale_.load()) return false;
  const rpc::PieceHash& piece = hashes_.pieces.at(index);
  if (!Unchanged()) {
    stale_ = true;
    return false;
  }
  bool good = false;
  if (verified_[index].load()) {
    TG_ASSIGN_OR_RETURN(good, ReadFully(fd_, dst, piece.range.size, piece.range.offset));
  } else {
    TG_ASSIGN_OR_RETURN(std::optional<rpc::Sha256Digest> got,
                        HashedRead(fd_, piece.range.offset, piece.range.size, dst, nullptr));
    good = got.has_value() && *got == piece.digest;
  }
  // A change during the read (a write moves ctime) makes what was read suspect.
  if (!good || !Unchanged()) {
    stale_ = true;
    return false;
  }
  verified_[index] = true;
  return true;
}

}  // namespace tg::server
