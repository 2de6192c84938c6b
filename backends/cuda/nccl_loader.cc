#include "backends/cuda/nccl_loader.h"

#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifndef TG_CUBLAS_DIR
#define TG_CUBLAS_DIR "/usr/local/cuda/lib64"
#endif

namespace tg::cuda {
namespace {

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr) *missing = name;
  return *fn != nullptr;
}

bool ResolveAll(void* lib, NcclApi* api, std::string* missing) {
  return Resolve(lib, "ncclGetVersion", &api->get_version, missing) &&
         Resolve(lib, "ncclCommInitAll", &api->comm_init_all, missing) &&
         Resolve(lib, "ncclCommDestroy", &api->comm_destroy, missing) &&
         Resolve(lib, "ncclCommAbort", &api->comm_abort, missing) &&
         Resolve(lib, "ncclCommGetAsyncError", &api->comm_get_async_error, missing) &&
         Resolve(lib, "ncclGetErrorString", &api->get_error_string, missing) &&
         Resolve(lib, "ncclAllReduce", &api->all_reduce, missing) &&
         Resolve(lib, "ncclGroupStart", &api->group_start, missing) &&
         Resolve(lib, "ncclGroupEnd", &api->group_end, missing);
}

}  // namespace

absl::StatusOr<NcclApi> LoadNccl(const std::vector<std::string>& candidates) {
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    // RTLD_LOCAL: its symbols stay out of the process's namespace.
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      errors.push_back(err != nullptr ? err : path);
      continue;
    }
    NcclApi api;
    std::string missing;
    if (!ResolveAll(lib, &api, &missing)) {
      errors.push_back(absl::StrCat(path, " has no ", missing));
      dlclose(lib);
      continue;
    }
    if (api.get_version(&api.version) != kNcclSuccess || api.version < kMinNcclVersion) {
      errors.push_back(
          absl::StrCat(path, " is NCCL ", api.version, ", older than ", kMinNcclVersion));
      dlclose(lib);
      continue;
    }
    return api;  // the library stays loaded for the life of the process.
  }
  return absl::NotFoundError(absl::StrCat("NCCL not found (", absl::StrJoin(errors, "; "), ")"));
}

std::vector<std::string> NcclCandidates() {
  std::vector<std::string> c;
  if (const char* env = std::getenv("TG_NCCL_LIBRARY"); env != nullptr && *env != '\0') {
    c.push_back(env);
  }
  c.push_back("libnccl.so.2");
  c.push_back(absl::StrCat(TG_CUBLAS_DIR, "/libnccl.so.2"));
  return c;
}

absl::StatusOr<const NcclApi*> Nccl() {
  static const absl::StatusOr<NcclApi>* const api =
      new absl::StatusOr<NcclApi>(LoadNccl(NcclCandidates()));
  if (!api->ok()) return api->status();
  return &**api;
}

absl::Status NcclError(const NcclApi& api, NcclResult result, absl::string_view call) {
  const char* text = api.get_error_string != nullptr ? api.get_error_string(result) : nullptr;
  const std::string message = absl::StrCat(call, ": ", text != nullptr ? text : "NCCL error",
                                           " (ncclResult_t ", static_cast<int>(result), ")");
  if (result == kNcclSystemError || result == kNcclRemoteError) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

}  // namespace tg::cuda
