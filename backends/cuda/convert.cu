// Kernels that move and convert data: CPY/CONT, GET_ROWS, SET_ROWS, and the quantization of
// activations into Q8_1 blocks for the matrix-vector kernel. Element access goes through
// quant_math.h, the same code the host unit tests check against core/quants.cc.
#include <cmath>
#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch_geometry.h"

namespace tg::cuda {
namespace {

// Element i0 of a row of any type, as f32.
__device__ __forceinline__ float ReadF32(const TensorView& v, const char* row, int64_t i0) {
  return IsQuantizedType(v.type) ? DequantAt(v.type, row, i0)
                                 : LoadAsF32(v.type, row + i0 * v.nb[0]);
}

// Plain -> plain: element k of src (logical order) to element k of dst; equal types copy bits.
__global__ void CopyPlainKernel(TensorView dst, TensorView src, int64_t n) {
  const int bytes = BlockBytesOf(src.type);
  for (int64_t k = GlobalThread(); k < n; k += GridThreads()) {
    int64_t i[4], j[4];
    Unravel(k, src.ne, i);
    Unravel(k, dst.ne, j);
    const char* s = src.data + Offset(src, i[0], i[1], i[2], i[3]);
    char* d = dst.data + Offset(dst, j[0], j[1], j[2], j[3]);
    if (src.type != dst.type) {
      StoreFromF32(dst.type, d, LoadAsF32(src.type, s));
    } else if (bytes == 4) {
      *reinterpret_cast<uint32_t*>(d) = *reinterpret_cast<const uint32_t*>(s);
    } else {
      *reinterpret_cast<uint16_t*>(d) = *reinterpret_cast<const uint16_t*>(s);
    }
  }
}

// Quantized -> plain, rows in order (equal ne0): one thread per element.
__global__ void DequantRowsKernel(TensorView dst, TensorView src, int64_t n) {
  const int64_t n0 = src.ne[0];
  for (int64_t k = GlobalThread(); k < n; k += GridThreads()) {
    const int64_t r = k / n0, i0 = k % n0;
    StoreFromF32(dst.type, RowPtr(dst, r) + i0 * dst.nb[0],
                 DequantAt(src.type, RowPtr(src, r), i0));
  }
}

// Plain -> Q8_0/Q4_0, rows in order: one thread per destination block.
__global__ void QuantizeRowsKernel(TensorView dst, TensorView src, int64_t n_blocks) {
  constexpr int kBlock = 32;  // both Q8_0 and Q4_0.
  const int64_t per_row = dst.ne[0] / kBlock;
  for (int64_t u = GlobalThread(); u < n_blocks; u += GridThreads()) {
    const int64_t r = u / per_row, b = u % per_row;
    const char* s = RowPtr(src, r);
    float x[kBlock];
    for (int j = 0; j < kBlock; ++j) x[j] = LoadAsF32(src.type, s + (b * kBlock + j) * src.nb[0]);
    char* d = RowPtr(dst, r);
    if (dst.type == kTypeQ8_0) {
      QuantizeBlockQ8_0Ref(x, reinterpret_cast<BlockQ8_0*>(d) + b);
    } else {
      QuantizeBlockQ4_0Ref(x, reinterpret_cast<BlockQ4_0*>(d) + b);
    }
  }
}

// Same quantized type: the rows' bytes, 2 at a time (Piece uint16_t), or one at a time where
// a row has an odd count (MXFP4's 17-byte blocks, an odd number of them).
template <typename Piece>
__global__ void CopyQuantRowsKernel(TensorView dst, TensorView src, int64_t row_pieces, int64_t n) {
  for (int64_t k = GlobalThread(); k < n; k += GridThreads()) {
    const int64_t r = k / row_pieces, h = k % row_pieces;
    reinterpret_cast<Piece*>(RowPtr(dst, r))[h] = reinterpret_cast<const Piece*>(RowPtr(src, r))[h];
  }
}

// One block per destination row (i, j2, j3); an index out of range is reported and its row
// written as zeros (the CPU's behaviour).
__global__ void GetRowsKernel(TensorView dst, TensorView a, TensorView idx, ErrorSink err) {
  for (int64_t r = blockIdx.x; r < NumRows(dst); r += gridDim.x) {
    const auto [i, j2, j3] = RowOf(dst, r);
    const int32_t row = *reinterpret_cast<const int32_t*>(idx.data + Offset(idx, i, j2, j3, 0));
    char* out = dst.data + Offset(dst, 0, i, j2, j3);
    const bool bad = row < 0 || row >= a.ne[1];
    if (bad && threadIdx.x == 0) ReportError(err, kBadRowIndex, row, a.ne[1]);
    const char* in = bad ? nullptr : a.data + Offset(a, 0, row, j2, j3);
    for (int64_t i0 = threadIdx.x; i0 < a.ne[0]; i0 += blockDim.x) {
      *reinterpret_cast<float*>(out + i0 * dst.nb[0]) = bad ? 0.0f : ReadF32(a, in, i0);
    }
  }
}

// One block per source row (i, j2, j3); an index out of range is reported and the row
// skipped. Quantized destinations: one thread per block of 32.
__global__ void SetRowsKernel(TensorView dst, TensorView b, TensorView idx, ErrorSink err) {
  for (int64_t r = blockIdx.x; r < NumRows(b); r += gridDim.x) {
    const auto [i, j2, j3] = RowOf(b, r);
    const int32_t row = *reinterpret_cast<const int32_t*>(
        idx.data + Offset(idx, i, j2 % idx.ne[1], j3 % idx.ne[2], 0));
    if (row < 0 || row >= dst.ne[1]) {
      if (threadIdx.x == 0) ReportError(err, kBadRowIndex, row, dst.ne[1]);
      continue;
    }
    const char* in = b.data + Offset(b, 0, i, j2, j3);
    char* out = dst.data + Offset(dst, 0, row, j2, j3);
    if (IsQuantizedType(dst.type)) {
      constexpr int kBlock = 32;
      for (int64_t blk = threadIdx.x; blk < b.ne[0] / kBlock; blk += blockDim.x) {
        float x[kBlock];
        for (int j = 0; j < kBlock; ++j) {
          x[j] = *reinterpret_cast<const float*>(in + (blk * kBlock + j) * b.nb[0]);
        }
        if (dst.type == kTypeQ8_0) {
          QuantizeBlockQ8_0Ref(x, reinterpret_cast<BlockQ8_0*>(out) + blk);
        } else {
          QuantizeBlockQ4_0Ref(x, reinterpret_cast<BlockQ4_0*>(out) + blk);
        }
      }
      continue;
    }
    for (int64_t i0 = threadIdx.x; i0 < b.ne[0]; i0 += blockDim.x) {
      StoreFromF32(dst.type, out + i0 * dst.nb[0],
                   *reinterpret_cast<const float*>(in + i0 * b.nb[0]));
    }
  }
}

// One warp per group of 32 (ActScale32): lane j quantizes element j.
__global__ void QuantizeAct32Kernel(TensorView src, BlockQ8_1* out, int64_t n_units) {
  const int lane = threadIdx.x % 32;
  const int64_t per_row = src.ne[0] / kQK8_1;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kQuantizeWarps + threadIdx.x / 32;
       u < n_units; u += static_cast<int64_t>(gridDim.x) * kQuantizeWarps) {
    const int64_t r = u / per_row, g = u % per_row;
    const float x =
        *reinterpret_cast<const float*>(RowPtr(src, r) + (g * kQK8_1 + lane) * src.nb[0]);
    const ActScale s = ActScale32(WarpMax(fabsf(x)));
    const int8_t q = ActQuant32(x, s.id);
    const int sum = WarpSum(static_cast<int>(q));
    out[u].qs[lane] = q;
    if (lane == 0) {
      out[u].d = s.d;
      out[u].sum = sum;
    }
  }
}

// One warp per group of 256 (ActScale256): lane j quantizes elements j + 32 e, e < 8, so
// block e of the group is written by all lanes together.
__global__ void QuantizeAct256Kernel(TensorView src, BlockQ8_1* out, int64_t n_units) {
  constexpr int kPerLane = kQK_K / 32;
  const int lane = threadIdx.x % 32;
  const int64_t per_row = src.ne[0] / kQK_K;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kQuantizeWarps + threadIdx.x / 32;
       u < n_units; u += static_cast<int64_t>(gridDim.x) * kQuantizeWarps) {
    const int64_t r = u / per_row, g = u % per_row;
    const char* row = RowPtr(src, r);
    float x[kPerLane];
    float amax = 0.0f;
    for (int e = 0; e < kPerLane; ++e) {
      x[e] = *reinterpret_cast<const float*>(row + (g * kQK_K + 32 * e + lane) * src.nb[0]);
      amax = fmaxf(amax, fabsf(x[e]));
    }
    amax = WarpMax(amax);
    int first = kQK_K;  // the first element of largest magnitude, as QuantizeRowQ8_K picks.
    for (int e = kPerLane - 1; e >= 0; --e) {
      if (fabsf(x[e]) == amax) first = min(first, 32 * e + lane);
    }
    first = WarpMinInt(first);
    float mine = 0.0f;  // this lane's element of the winner's column e.
    for (int e = 0; e < kPerLane; ++e) {
      if (e == first / 32) mine = x[e];
    }
    const float x_first = first < kQK_K ? __shfl_sync(kFullMask, mine, first % 32) : 0.0f;
    const ActScale s = ActScale256(x_first);
    for (int e = 0; e < kPerLane; ++e) {
      BlockQ8_1& b = out[u * kPerLane + e];
      const int8_t q = ActQuant256(x[e], s.id);
      const int sum = WarpSum(static_cast<int>(q));
      b.qs[lane] = q;
      if (lane == 0) {
        b.d = s.d;
        b.sum = sum;
      }
    }
  }
}

}  // namespace

cudaError_t LaunchCopy(const TensorView& dst, const TensorView& src, cudaStream_t stream) {
  const int64_t n = NumElements(src);
  const bool q_src = IsQuantizedType(src.type), q_dst = IsQuantizedType(dst.type);
  if (!q_src && !q_dst) {
    return LaunchOn(ElementwiseLaunch(n), stream, CopyPlainKernel, dst, src, n);
  }
  if (q_src && q_dst) {  // same type (CudaSupportsOp allows no other quantized pair).
    const int64_t row_bytes = src.ne[0] / BlockElems(src.type) * BlockBytesOf(src.type);
    if (row_bytes % 2 != 0) {
      const int64_t bytes = row_bytes * NumRows(src);
      return LaunchOn(ElementwiseLaunch(bytes), stream, CopyQuantRowsKernel<uint8_t>, dst, src,
                      row_bytes, bytes);
    }
    const int64_t halves = row_bytes / 2 * NumRows(src);
    return LaunchOn(ElementwiseLaunch(halves), stream, CopyQuantRowsKernel<uint16_t>, dst, src,
                    row_bytes / 2, halves);
  }
  if (q_src) return LaunchOn(ElementwiseLaunch(n), stream, DequantRowsKernel, dst, src, n);
  const int64_t n_blocks = n / 32;
  return LaunchOn(ElementwiseLaunch(n_blocks), stream, QuantizeRowsKernel, dst, src, n_blocks);
}

cudaError_t LaunchGetRows(const TensorView& dst, const TensorView& a, const TensorView& idx,
                          ErrorSink err, cudaStream_t stream) {
  return LaunchOn(RowLaunch(NumRows(dst), a.ne[0]), stream, GetRowsKernel, dst, a, idx, err);
}

cudaError_t LaunchSetRows(const TensorView& dst, const TensorView& b, const TensorView& idx,
                          ErrorSink err, cudaStream_t stream) {
  const int64_t per_row = IsQuantizedType(dst.type) ? b.ne[0] / 32 : b.ne[0];
  return LaunchOn(RowLaunch(NumRows(b), per_row), stream, SetRowsKernel, dst, b, idx, err);
}

cudaError_t LaunchQuantizeAct(int weight_type, const TensorView& src, BlockQ8_1* out,
                              cudaStream_t stream) {
  const int group = ActGroup(weight_type);
  const int64_t n_units = NumRows(src) * (src.ne[0] / group);
  const Launch l = WarpLaunch(n_units, kQuantizeWarps);
  if (group == kQK8_1) return LaunchOn(l, stream, QuantizeAct32Kernel, src, out, n_units);
  return LaunchOn(l, stream, QuantizeAct256Kernel, src, out, n_units);
}

}  // namespace tg::cuda
