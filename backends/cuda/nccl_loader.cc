#include "backends/cuda/nccl_loader.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "backends/cuda/shared_library.h"

#ifndef TG_CUBLAS_DIR
#define TG_CUBLAS_DIR "/usr/local/cuda/lib64"
#endif

namespace tg::cuda {
namespace {

bool ResolveAll(void* lib, NcclApi* api, std::string* missing) {
  return ResolveSymbol(lib, "ncclGetVersion", &api->get_version, missing) &&
         ResolveSymbol(lib, "ncclCommInitAll", &api->comm_init_all, missing) &&
         ResolveSymbol(lib, "ncclCommDestroy", &api->comm_destroy, missing) &&
         ResolveSymbol(lib, "ncclCommAbort", &api->comm_abort, missing) &&
         ResolveSymbol(lib, "ncclCommGetAsyncError", &api->comm_get_async_error, missing) &&
         ResolveSymbol(lib, "ncclGetErrorString", &api->get_error_string, missing) &&
         ResolveSymbol(lib, "ncclAllReduce", &api->all_reduce, missing) &&
         ResolveSymbol(lib, "ncclGroupStart", &api->group_start, missing) &&
         ResolveSymbol(lib, "ncclGroupEnd", &api->group_end, missing);
}

}  // namespace

absl::StatusOr<NcclApi> LoadNccl(const std::vector<std::string>& candidates) {
  return OpenFirstLibrary<NcclApi>("NCCL", candidates, [](void* lib, NcclApi* api) -> std::string {
    std::string missing;
    if (!ResolveAll(lib, api, &missing)) return absl::StrCat("has no ", missing);
    if (api->get_version(&api->version) != kNcclSuccess || api->version < kMinNcclVersion) {
      return absl::StrCat("is NCCL ", api->version, ", older than ", kMinNcclVersion);
    }
    return "";
  });
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
