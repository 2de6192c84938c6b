#include "backends/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <string>
#include <vector>

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

absl::StatusOr<CublasApi> Load() {
  const std::string soname = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  const std::vector<std::string> candidates = {soname, absl::StrCat(TG_CUBLAS_DIR, "/", soname)};
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    // RTLD_LOCAL: its symbols stay out of the process's namespace.
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      errors.push_back(err != nullptr ? err : path);
      continue;
    }
    CublasApi api;
    std::string missing;
    if (Resolve(lib, "cublasCreate_v2", &api.create, &missing) &&
        Resolve(lib, "cublasDestroy_v2", &api.destroy, &missing) &&
        Resolve(lib, "cublasSetStream_v2", &api.set_stream, &missing) &&
        Resolve(lib, "cublasSgemm_v2", &api.sgemm, &missing) &&
        Resolve(lib, "cublasGemmEx", &api.gemm_ex, &missing) &&
        Resolve(lib, "cublasGetStatusName", &api.status_name, &missing) &&
        Resolve(lib, "cublasGetStatusString", &api.status_string, &missing)) {
      return api;  // the library stays loaded for the life of the process.
    }
    errors.push_back(absl::StrCat(path, " has no ", missing));
    dlclose(lib);
  }
  return absl::NotFoundError(absl::StrCat("cuBLAS not found (", absl::StrJoin(errors, "; "), ")"));
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  static const absl::StatusOr<CublasApi>* const api = new absl::StatusOr<CublasApi>(Load());
  if (!api->ok()) return api->status();
  return &**api;
}

}  // namespace tg::cuda
