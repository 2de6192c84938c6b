// Device-only helpers of the CUDA kernels: warp and block reductions, the run-time error
// report, launching, grid-stride indices. Block reductions take blockDim.x a multiple of 32
// (at most 1024), give every thread the result, and combine warps in a fixed order
// (deterministic results).
#ifndef TENSORGRID_BACKENDS_CUDA_DEVICE_COMMON_CUH_
#define TENSORGRID_BACKENDS_CUDA_DEVICE_COMMON_CUH_

#include <cstdint>

#include "backends/cuda/kernels.h"
#include "backends/cuda/launch_geometry.h"

namespace tg::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__device__ __forceinline__ int WarpMinInt(int v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// scratch: 32 elements of shared memory, free on entry, free again on return.
template <typename T, typename Combine>
__device__ T BlockReduce(T v, Combine combine, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(kFullMask, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < n_warps; ++w) r = combine(r, scratch[w]);
  __syncthreads();
  return r;
}

__device__ __forceinline__ void ReportError(const ErrorSink& sink, int code, int64_t value,
                                            int64_t limit) {
  if (sink.record == nullptr) return;
  if (atomicCAS(&sink.record->code, 0, code) == 0) {
    sink.record->node = sink.node;
    sink.record->value = value;
    sink.record->limit = limit;
  }
}

// The launch error of the kernel just queued (a launch itself never blocks).
inline cudaError_t LaunchResult() { return cudaGetLastError(); }

// Queues kernel<<<l>>>(args...) on stream; nothing for an empty launch (a 0 grid is an error).
template <typename Kernel, typename... Args>
cudaError_t LaunchOn(const Launch& l, cudaStream_t stream, Kernel kernel, Args... args) {
  if (l.empty()) return cudaSuccess;
  kernel<<<dim3(l.grid.x, l.grid.y, l.grid.z), dim3(l.block.x, l.block.y, l.block.z), 0, stream>>>(
      args...);
  return LaunchResult();
}

// This thread's index in a 1-D launch, and the threads of the grid (grid-stride loops).
__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_DEVICE_COMMON_CUH_
