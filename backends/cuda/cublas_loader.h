// cuBLAS, loaded with dlopen by the first CUDA stream instead of linked: a binary built with
// CUDA must start and serve its CPUs where there is no GPU, no driver and no cuBLAS, and
// libcublasLt's 94 KiB of thread-local storage, in the static TLS block of every thread of a
// process that links it, makes thread creation with small stacks fail (civetweb's, behind
// the Prometheus exposer). Thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_CUBLAS_LOADER_H_
#define TENSORGRID_BACKENDS_CUDA_CUBLAS_LOADER_H_

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace tg::cuda {

// The entry points tensorgrid uses.
struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSgemm_v2) sgemm;
  // cublasGemmEx is overloaded in C++ (a deprecated cudaDataType compute type): name it.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// The process's cuBLAS (libcublas.so.<the toolkit's major version>), loaded on first use from
// the library path, then from the build machine's toolkit directory; NOT_FOUND naming what
// was tried otherwise. The answer never changes afterwards.
absl::StatusOr<const CublasApi*> Cublas();

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUBLAS_LOADER_H_
