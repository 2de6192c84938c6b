// A point in a CUDA stream's work (cudaEvent_t, timing off): the scheduler records one after
// a device's split and lets another device's stream wait for it without blocking the host.
// Record on a stream of the device that created it; wait from any CUDA stream.
// Thread-safe as CUDA events are.
#ifndef TENSORGRID_BACKENDS_CUDA_CUDA_EVENT_H_
#define TENSORGRID_BACKENDS_CUDA_CUDA_EVENT_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "core/backend.h"

namespace tg::cuda {

class CudaEvent : public Event {
 public:
  static absl::StatusOr<std::unique_ptr<CudaEvent>> Create(int device_index);
  ~CudaEvent() override;
  absl::Status Synchronize() override;

  cudaEvent_t get() const { return event_; }
  int device_index() const { return device_index_; }

 private:
  CudaEvent(int device_index, cudaEvent_t event) : device_index_(device_index), event_(event) {}
  int device_index_;
  cudaEvent_t event_;
};

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_CUDA_EVENT_H_
