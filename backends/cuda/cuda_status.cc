#include "backends/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"
#include "backends/cuda/cublas_loader.h"

namespace tg::cuda {

absl::StatusCode CudaErrorCode(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorDeviceUninitialized:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorECCUncorrectable:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchFailure:
    case cudaErrorUnknown:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudaError(cudaError_t err, absl::string_view call) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // see the header: reset the last-error slot.
  return absl::Status(CudaErrorCode(err), absl::StrCat(call, ": ", cudaGetErrorName(err), " (",
                                                       cudaGetErrorString(err), ")"));
}

absl::Status CublasError(cublasStatus_t err, absl::string_view call) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code =
      err == CUBLAS_STATUS_ALLOC_FAILED
          ? absl::StatusCode::kResourceExhausted
          : (err == CUBLAS_STATUS_NOT_INITIALIZED ? absl::StatusCode::kUnavailable
                                                  : absl::StatusCode::kInternal);
  absl::StatusOr<const CublasApi*> api = Cublas();
  if (!api.ok()) {
    return absl::Status(code, absl::StrCat(call, ": cuBLAS status ", static_cast<int>(err)));
  }
  return absl::Status(code, absl::StrCat(call, ": ", (*api)->status_name(err), " (",
                                         (*api)->status_string(err), ")"));
}

}  // namespace tg::cuda
