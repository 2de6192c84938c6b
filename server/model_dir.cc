#include "server/model_dir.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace tg::server {
namespace {

constexpr Logger kLog("rpc-server");
constexpr absl::string_view kModelSuffix = ".gguf";

absl::StatusOr<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  return std::string(buf);
}

}  // namespace

absl::StatusOr<ModelDir> OpenModelDir(const std::string& path) {
  absl::StatusOr<std::string> real = RealPath(path);
  if (!real.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model-dir ", real.status().message()));
  }
  struct stat st;
  if (stat(real->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--model-dir ", path, " is not a directory"));
  }
  DIR* d = opendir(real->c_str());
  if (d == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model-dir ", path, ": cannot list it: ", std::strerror(errno)));
  }
  closedir(d);
  return ModelDir{path, *std::move(real)};
}

bool IsInside(absl::string_view real_path, absl::string_view dir_real) {
  if (dir_real == "/") return real_path.size() > 1 && real_path[0] == '/';
  return real_path.size() > dir_real.size() + 1 && absl::StartsWith(real_path, dir_real) &&
         real_path[dir_real.size()] == '/';
}

std::vector<ModelDirFile> ScanModelDirs(absl::Span<const ModelDir> dirs) {
  namespace fs = std::filesystem;
  std::vector<ModelDirFile> files;
  absl::flat_hash_set<std::string> seen;
  for (const ModelDir& dir : dirs) {
    std::error_code ec;
    fs::recursive_directory_iterator it(dir.real, fs::directory_options::skip_permission_denied,
                                        ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string path = it->path().string();
      if (!absl::EndsWith(path, kModelSuffix)) continue;
      absl::StatusOr<std::string> real = RealPath(path);
      struct stat st;
      if (!real.ok() || stat(real->c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (!IsInside(*real, dir.real)) {
        kLog.Warn("model-dir: skipped a file that resolves outside its --model-dir",
                  {{"file", path}, {"target", *real}, {"model_dir", dir.given}});
        continue;
      }
      if (!seen.insert(*real).second) continue;
      files.push_back({*real, real->substr(dir.real.size() + (dir.real == "/" ? 0 : 1))});
    }
    if (ec) {
      kLog.Warn("model-dir: listing stopped early",
                {{"model_dir", dir.given}, {"error", ec.message()}});
    }
  }
  return files;
}

absl::StatusOr<std::string> CheckClientName(absl::string_view name,
                                            absl::Span<const ModelDir> dirs) {
  namespace fs = std::filesystem;
  const fs::path normal = fs::path(std::string(name)).lexically_normal();
  std::string relative;
  if (normal.is_absolute()) {
    const std::string n = normal.string();
    for (const ModelDir& dir : dirs) {
      for (const std::string& base : {dir.real, fs::path(dir.given).lexically_normal().string()}) {
        const std::string b =
            absl::EndsWith(base, "/") && base.size() > 1 ? base.substr(0, base.size() - 1) : base;
        if (relative.empty() && IsInside(n, b)) relative = n.substr(b.size() + (b == "/" ? 0 : 1));
      }
    }
  } else {
    relative = normal.string();
  }
  const bool escapes = relative.empty() || relative == "." || relative == ".." ||
                       absl::StartsWith(relative, "../") || absl::StrContains(relative, "/../");
  if (escapes) {
    return absl::PermissionDeniedError(
        absl::StrCat("model file '", name, "' is outside every --model-dir of this server"));
  }
  return relative;
}

}  // namespace tg::server
