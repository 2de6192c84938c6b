#include "tools/tg-gguf/hash.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "client/model_upload.h"
#include "gguf/gguf_file.h"
#include "models/llama_model.h"
#include "proto/model_hashes.h"
#include "proto/parallel_hash.h"

namespace tg::gguf_tool {
namespace {

absl::StatusOr<int64_t> MtimeNs(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

absl::Status RunHash(const std::string& path, std::FILE* out) {
  const auto start = std::chrono::steady_clock::now();
  TG_ASSIGN_OR_RETURN(const int64_t mtime, MtimeNs(path));
  TG_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  const rpc::ModelFileView view = rpc::ModelFileViewOf(WeightSourceOf(*file));
  rpc::ModelHashes hashes;
  hashes.identity = rpc::IdentityOf(view.bytes.subspan(0, view.data_start), view.bytes.size());
  hashes.mtime_ns = mtime;
  const std::vector<rpc::FileRange> pieces = rpc::SplitIntoPieces(view.tensors);
  const std::vector<rpc::Sha256Digest> digests =
      rpc::HashPieces(view.bytes, pieces, rpc::HashThreads(0));
  uint64_t bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    hashes.pieces.push_back({pieces[i], digests[i]});
    bytes += pieces[i].size;
  }
  TG_ASSIGN_OR_RETURN(const int64_t mtime_after, MtimeNs(path));
  if (mtime_after != mtime) {
    return absl::AbortedError(absl::StrCat(path, " changed while it was hashed; run again"));
  }
  const std::string sidecar = rpc::SidecarPath(path);
  TG_RETURN_IF_ERROR(rpc::WriteModelHashes(sidecar, hashes));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(out, "hashed %zu pieces (%.1f MB) on %d threads in %.2f s (%.0f MB/s): wrote %s\n",
               pieces.size(), bytes / 1e6, rpc::HashThreads(0), seconds, bytes / 1e6 / seconds,
               sidecar.c_str());
  return absl::OkStatus();
}

}  // namespace tg::gguf_tool
