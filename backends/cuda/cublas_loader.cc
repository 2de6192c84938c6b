#include "backends/cuda/cublas_loader.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/shared_library.h"

#ifndef TG_CUBLAS_DIR
#define TG_CUBLAS_DIR "/usr/local/cuda/lib64"
#endif

namespace tg::cuda {
namespace {

absl::StatusOr<CublasApi> Load() {
  const std::string soname = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  return OpenFirstLibrary<CublasApi>(
      "cuBLAS", {soname, absl::StrCat(TG_CUBLAS_DIR, "/", soname)},
      [](void* lib, CublasApi* api) -> std::string {
        std::string missing;
        if (ResolveSymbol(lib, "cublasCreate_v2", &api->create, &missing) &&
            ResolveSymbol(lib, "cublasDestroy_v2", &api->destroy, &missing) &&
            ResolveSymbol(lib, "cublasSetStream_v2", &api->set_stream, &missing) &&
            ResolveSymbol(lib, "cublasSgemm_v2", &api->sgemm, &missing) &&
            ResolveSymbol(lib, "cublasGemmEx", &api->gemm_ex, &missing) &&
            ResolveSymbol(lib, "cublasGetStatusName", &api->status_name, &missing) &&
            ResolveSymbol(lib, "cublasGetStatusString", &api->status_string, &missing)) {
          return "";
        }
        return absl::StrCat("has no ", missing);
      });
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  static const absl::StatusOr<CublasApi>* const api = new absl::StatusOr<CublasApi>(Load());
  if (!api->ok()) return api->status();
  return &**api;
}

}  // namespace tg::cuda
