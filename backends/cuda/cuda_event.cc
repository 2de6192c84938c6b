#include "backends/cuda/cuda_event.h"

#include "backends/cuda/cuda_status.h"

namespace tg::cuda {

absl::StatusOr<std::unique_ptr<CudaEvent>> CudaEvent::Create(int device_index) {
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index));
  cudaEvent_t event = nullptr;
  TG_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return std::unique_ptr<CudaEvent>(new CudaEvent(device_index, event));
}

CudaEvent::~CudaEvent() {
  cudaSetDevice(device_index_);
  cudaEventDestroy(event_);
}

absl::Status CudaEvent::Synchronize() {
  TG_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_));
  return absl::OkStatus();
}

}  // namespace tg::cuda
