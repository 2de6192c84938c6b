// CUDA runtime and cuBLAS errors as absl::Status, naming the call that failed: a CUDA error
// never ends the process. Out of memory is RESOURCE_EXHAUSTED; a missing driver or device,
// or a device that fell off the bus, is UNAVAILABLE; anything else INTERNAL. Thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_STATUS_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_STATUS_H_

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tg::cuda {

// The status code a CUDA runtime error maps to.
absl::StatusCode CudaErrorCode(cudaError_t err);
// "call: cudaErrorName (description)" with CudaErrorCode's code. Also clears the runtime's
// last-error slot, so that a non-sticky error (a failed allocation) does not resurface at
// the next kernel launch check.
absl::Status CudaError(cudaError_t err, absl::string_view call);
absl::Status CublasError(cublasStatus_t err, absl::string_view call);

}  // namespace tg::cuda

// Returns error(result, text) from the enclosing function when `expr`, of type `type`, is not
// `success`; text is expr's source (the two macros below).
#define TG_CUDA_RETURN_IF_FAILED(expr, text, type, success, error)   \
  do {                                                               \
    if (const type _tg_cuda_err = (expr); _tg_cuda_err != success) { \
      return error(_tg_cuda_err, text);                              \
    }                                                                \
  } while (0)

// Returns from the enclosing function with CudaError when `expr` (a cudaError_t) fails.
#define TG_CUDA_RETURN_IF_ERROR(expr) \
  TG_CUDA_RETURN_IF_FAILED(expr, #expr, cudaError_t, cudaSuccess, ::tg::cuda::CudaError)
// Likewise with CublasError for a cublasStatus_t.
#define TG_CUBLAS_RETURN_IF_ERROR(expr)                                        \
  TG_CUDA_RETURN_IF_FAILED(expr, #expr, cublasStatus_t, CUBLAS_STATUS_SUCCESS, \
                           ::tg::cuda::CublasError)

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_STATUS_H_
