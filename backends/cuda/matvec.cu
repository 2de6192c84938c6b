// The matrix-vector kernel of MUL_MAT (decode: up to kMatVecMaxCols activation columns) and
// MUL_MAT_ID (one column per slot and token, each with its expert). One warp per weight row:
// the lanes walk the row's units (32 quants, or one element of a float type), so each weight
// byte is read once per pass and met by every column of the pass. Quantized weights meet
// Q8_1 activations (integer dot products, quant_math.h); F32/F16/BF16 weights meet the f32
// activations themselves.
#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch_geometry.h"

namespace tg::cuda {
namespace {

// Per weight type: elements per unit, and the dot product of unit u of a weight row with the
// same unit of an activation column.
template <int kType>
struct Unit;

template <>
struct Unit<kTypeF32> {
  static constexpr int kElems = 1;
  static __device__ float Dot(const char* w, int64_t u, const char* act) {
    return reinterpret_cast<const float*>(w)[u] * reinterpret_cast<const float*>(act)[u];
  }
};
template <>
struct Unit<kTypeF16> {
  static constexpr int kElems = 1;
  static __device__ float Dot(const char* w, int64_t u, const char* act) {
    return HalfToF32(reinterpret_cast<const uint16_t*>(w)[u]) *
           reinterpret_cast<const float*>(act)[u];
  }
};
template <>
struct Unit<kTypeBF16> {
  static constexpr int kElems = 1;
  static __device__ float Dot(const char* w, int64_t u, const char* act) {
    return BF16ToF32(reinterpret_cast<const uint16_t*>(w)[u]) *
           reinterpret_cast<const float*>(act)[u];
  }
};
template <>
struct Unit<kTypeQ4_0> {
  static constexpr int kElems = kQK8_1;
  static __device__ float Dot(const char* w, int64_t u, const char* act) {
    return DotQ4_0(reinterpret_cast<const BlockQ4_0*>(w)[u],
                   reinterpret_cast<const BlockQ8_1*>(act)[u]);
  }
};
template <>
struct Unit<kTypeQ8_0> {
  static constexpr int kElems = kQK8_1;
  static __device__ float Dot(const char* w, int64_t u, const char* act) {
    return DotQ8_0(reinterpret_cast<const BlockQ8_0*>(w)[u],
                   reinterpret_cast<const BlockQ8_1*>(act)[u]);
  }
};
template <>
struct Unit<kTypeQ4_K> {
  static constexpr int kElems = kQK8_1;
  static __device__ float Dot(const char* w, int64_t u, const char* act) {
    return DotQ4_K(reinterpret_cast<const BlockQ4_K*>(w)[u / 8], static_cast<int>(u % 8),
                   reinterpret_cast<const BlockQ8_1*>(act)[u]);
  }
};
template <>
struct Unit<kTypeQ6_K> {
  static constexpr int kElems = kQK8_1;
  static __device__ float Dot(const char* w, int64_t u, const char* act) {
    return DotQ6_K(reinterpret_cast<const BlockQ6_K*>(w)[u / 8], static_cast<int>(u % 8),
                   reinterpret_cast<const BlockQ8_1*>(act)[u]);
  }
};

template <int kType>
__global__ void MatVecKernel(MatVecArgs p) {
  const int lane = threadIdx.x % 32;
  const int64_t row = MatVecRow(blockIdx.x, threadIdx.x / 32);
  const int64_t bt = BatchIndex(blockIdx.y, blockIdx.z, gridDim.y);
  if (row >= p.m || bt >= p.n_batch) return;  // whole warps: row and bt are warp-uniform.
  const char* w;
  int64_t act_col, dst_col;
  int n_cols = p.n_cols;
  if (p.ids == nullptr) {
    const int64_t j2 = bt % p.b2, j3 = bt / p.b2;
    w = p.w + (j2 / p.r2) * p.w_nb2 + (j3 / p.r3) * p.w_nb3;
    act_col = dst_col = bt * p.cols_per_batch + p.col0;
  } else {
    const int64_t i = bt % p.n_used, t = bt / p.n_used;
    const int32_t e = *reinterpret_cast<const int32_t*>(p.ids + i * p.ids_nb0 + t * p.ids_nb1);
    if (e < 0 || e >= p.n_expert) {  // reported once per column; the column is zeros.
      if (lane == 0) {
        if (row == 0) ReportError(p.err, kBadExpertId, e, p.n_expert);
        p.dst[bt * p.m + row] = 0.0f;
      }
      return;
    }
    w = p.w + e * p.w_nb2;
    act_col = (i % p.act_per_token) + p.act_per_token * t;
    dst_col = bt;
    n_cols = 1;
  }
  w += row * p.w_nb1;
  const char* act = p.act + act_col * p.act_col_bytes;
  const int64_t n_units = p.k / Unit<kType>::kElems;
  float acc[kMatVecMaxCols] = {};
  for (int64_t u = lane; u < n_units; u += 32) {
#pragma unroll
    for (int c = 0; c < kMatVecMaxCols; ++c) {
      if (c < n_cols) acc[c] += Unit<kType>::Dot(w, u, act + c * p.act_col_bytes);
    }
  }
#pragma unroll
  for (int c = 0; c < kMatVecMaxCols; ++c) {
    if (c >= n_cols) break;
    const float sum = WarpSum(acc[c]);
    if (lane == 0) p.dst[(dst_col + c) * p.m + row] = sum;
  }
}

template <int kType>
cudaError_t LaunchTyped(const MatVecArgs& args, cudaStream_t stream) {
  const Launch l = MatVecLaunch(args.m, args.n_batch);
  if (l.empty()) return cudaSuccess;
  MatVecKernel<kType><<<dim3(l.grid.x, l.grid.y, l.grid.z), dim3(l.block.x), 0, stream>>>(args);
  return LaunchResult();
}

}  // namespace

cudaError_t LaunchMatVec(const MatVecArgs& args, cudaStream_t stream) {
  switch (args.weight_type) {
    case kTypeF32:
      return LaunchTyped<kTypeF32>(args, stream);
    case kTypeF16:
      return LaunchTyped<kTypeF16>(args, stream);
    case kTypeBF16:
      return LaunchTyped<kTypeBF16>(args, stream);
    case kTypeQ4_0:
      return LaunchTyped<kTypeQ4_0>(args, stream);
    case kTypeQ8_0:
      return LaunchTyped<kTypeQ8_0>(args, stream);
    case kTypeQ4_K:
      return LaunchTyped<kTypeQ4_K>(args, stream);
    case kTypeQ6_K:
      return LaunchTyped<kTypeQ6_K>(args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tg::cuda
