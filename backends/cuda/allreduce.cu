// The peer-to-peer all-reduce's element kernels (cuda_collectives.cc orders them with events
// between ranks): a sum over ranks in rank order, and a copy that converts between F32 and
// BF16 on the wire. Grid-stride loops; the sources may live on other GPUs (peer access) or
// in other slices of this one.
#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch_geometry.h"

namespace tg::cuda {
namespace {

__global__ void ReduceRanksKernel(WireSources srcs, bool src_bf16, void* dst, bool dst_bf16,
                                  size_t begin, size_t end) {
  for (size_t i = begin + GlobalThread(); i < end; i += GridThreads()) {
    StoreWire(dst, i, SumRanks(srcs.p, srcs.n, i, src_bf16), dst_bf16);
  }
}

__global__ void WireCopyKernel(const void* src, bool src_bf16, void* dst, bool dst_bf16,
                               size_t begin, size_t end) {
  for (size_t i = begin + GlobalThread(); i < end; i += GridThreads()) {
    StoreWire(dst, i, LoadWire(src, i, src_bf16), dst_bf16);
  }
}

}  // namespace

cudaError_t LaunchReduceRanks(const WireSources& srcs, bool src_bf16, void* dst, bool dst_bf16,
                              size_t begin, size_t end, cudaStream_t stream) {
  if (end <= begin || srcs.n < 1 || srcs.n > kMaxAllReduceRanks) {
    return end <= begin ? cudaSuccess : cudaErrorInvalidValue;
  }
  return LaunchOn(ElementwiseLaunch(static_cast<int64_t>(end - begin)), stream, ReduceRanksKernel,
                  srcs, src_bf16, dst, dst_bf16, begin, end);
}

cudaError_t LaunchWireCopy(const void* src, bool src_bf16, void* dst, bool dst_bf16, size_t begin,
                           size_t end, cudaStream_t stream) {
  if (end <= begin) return cudaSuccess;
  return LaunchOn(ElementwiseLaunch(static_cast<int64_t>(end - begin)), stream, WireCopyKernel,
                  src, src_bf16, dst, dst_bf16, begin, end);
}

}  // namespace tg::cuda
