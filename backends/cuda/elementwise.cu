// Elementwise and per-row kernels: ADD, MUL, SCALE, SILU, SWIGLU, RMS_NORM, SOFT_MAX, ROPE,
// ARGMAX. All read and write through ne/nb (views work), index with 64-bit integers and walk
// their items in grid-stride loops (launch_geometry.h).
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch_geometry.h"

namespace tg::cuda {
namespace {

__device__ __forceinline__ float& F32At(const TensorView& v, const int64_t i[4]) {
  return *reinterpret_cast<float*>(v.data + Offset(v, i[0], i[1], i[2], i[3]));
}

__global__ void BinaryKernel(BinaryOp op, TensorView dst, TensorView a, TensorView b, int64_t n) {
  for (int64_t k = GlobalThread(); k < n; k += GridThreads()) {
    int64_t i[4], j[4];
    Unravel(k, dst.ne, i);
    for (int d = 0; d < 4; ++d) j[d] = i[d] % b.ne[d];
    const float x = F32At(a, i), y = F32At(b, j);
    F32At(dst, i) = op == BinaryOp::kAdd ? x + y : x * y;
  }
}

__global__ void UnaryKernel(UnaryOp op, float p0, float p1, TensorView dst, TensorView a,
                            int64_t n) {
  for (int64_t k = GlobalThread(); k < n; k += GridThreads()) {
    int64_t i[4];
    Unravel(k, dst.ne, i);
    const float x = F32At(a, i);
    F32At(dst, i) = op == UnaryOp::kScale ? x * p0 + p1 : Silu(x);
  }
}

__global__ void SwigluKernel(TensorView dst, TensorView gate, TensorView up, int64_t n) {
  for (int64_t k = GlobalThread(); k < n; k += GridThreads()) {
    int64_t i[4];
    Unravel(k, dst.ne, i);
    F32At(dst, i) = Silu(F32At(gate, i)) * F32At(up, i);
  }
}

// 1 / sqrt(mean(x^2) + eps) of one row of n0 floats nb0 bytes apart, reduced over the block;
// the sum of squares in double, as the CPU does.
__device__ float RmsScale(const char* x, int64_t nb0, int64_t n0, float eps, double* scratch) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n0; i += blockDim.x) {
    const double v = *reinterpret_cast<const float*>(x + i * nb0);
    sum += v * v;
  }
  sum = BlockReduce(
      sum, [](double p, double q) { return p + q; }, scratch);
  return static_cast<float>(1.0 / sqrt(sum / static_cast<double>(n0) + eps));
}

// One block per row.
__global__ void RmsNormKernel(TensorView dst, TensorView a, float eps) {
  __shared__ double scratch[32];
  const int64_t n0 = a.ne[0];
  for (int64_t r = blockIdx.x; r < NumRows(a); r += gridDim.x) {
    const char* x = RowPtr(a, r);
    char* y = RowPtr(dst, r);
    const float scale = RmsScale(x, a.nb[0], n0, eps, scratch);
    for (int64_t i = threadIdx.x; i < n0; i += blockDim.x) {
      *reinterpret_cast<float*>(y + i * dst.nb[0]) =
          *reinterpret_cast<const float*>(x + i * a.nb[0]) * scale;
    }
  }
}

// RMS_NORM followed by MUL, one block per row: the MUL's result (x * scale) * w, with w
// broadcast as MUL does; the same float operations as the two kernels, without the norm's
// intermediate row in memory.
__global__ void RmsNormMulKernel(TensorView dst, TensorView a, TensorView w, float eps) {
  __shared__ double scratch[32];
  const int64_t n0 = a.ne[0];
  for (int64_t r = blockIdx.x; r < NumRows(a); r += gridDim.x) {
    const auto [i1, i2, i3] = RowOf(a, r);
    const char* x = a.data + Offset(a, 0, i1, i2, i3);
    char* y = dst.data + Offset(dst, 0, i1, i2, i3);
    const char* wr = w.data + Offset(w, 0, i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]);
    const float scale = RmsScale(x, a.nb[0], n0, eps, scratch);
    for (int64_t i = threadIdx.x; i < n0; i += blockDim.x) {
      const float normed = *reinterpret_cast<const float*>(x + i * a.nb[0]) * scale;
      *reinterpret_cast<float*>(y + i * dst.nb[0]) =
          normed * *reinterpret_cast<const float*>(wr + (i % w.ne[0]) * w.nb[0]);
    }
  }
}

// One block per row: logits into dst, their max, exps and their sum, then the division. A
// row that is all -inf gives zeros.
__global__ void SoftMaxKernel(TensorView dst, TensorView a, TensorView mask, bool has_mask,
                              float scale) {
  __shared__ float scratch[32];
  const int64_t n0 = a.ne[0];
  for (int64_t r = blockIdx.x; r < NumRows(a); r += gridDim.x) {
    const auto [i1, i2, i3] = RowOf(a, r);
    const char* x = a.data + Offset(a, 0, i1, i2, i3);
    char* y = dst.data + Offset(dst, 0, i1, i2, i3);
    const char* m =
        has_mask ? mask.data + Offset(mask, 0, i1, i2 % mask.ne[2], i3 % mask.ne[3]) : nullptr;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < n0; i += blockDim.x) {
      float v = *reinterpret_cast<const float*>(x + i * a.nb[0]) * scale;
      if (m != nullptr) v += LoadAsF32(mask.type, m + i * mask.nb[0]);
      *reinterpret_cast<float*>(y + i * dst.nb[0]) = v;
      mx = fmaxf(mx, v);
    }
    mx = BlockReduce(
        mx, [](float p, float q) { return fmaxf(p, q); }, scratch);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n0; i += blockDim.x) {
      float* p = reinterpret_cast<float*>(y + i * dst.nb[0]);
      *p = mx == -INFINITY ? 0.0f : expf(*p - mx);
      sum += *p;
    }
    sum = BlockReduce(
        sum, [](float p, float q) { return p + q; }, scratch);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t i = threadIdx.x; i < n0; i += blockDim.x) {
      *reinterpret_cast<float*>(y + i * dst.nb[0]) *= inv;
    }
  }
}

// One thread per output element; the pair's partner is read from the source. With a second
// tensor (dst1/a1, n1 elements: ROPE of Q and K fused) elements n .. n + n1 - 1 are its.
__global__ void RopeKernel(TensorView dst0, TensorView a0, TensorView dst1, TensorView a1,
                           TensorView pos, TensorView ff, bool has_ff, RopeArgs args, int64_t n,
                           int64_t n1) {
  for (int64_t k0 = GlobalThread(); k0 < n + n1; k0 += GridThreads()) {
    const bool second = k0 >= n;
    const int64_t k = second ? k0 - n : k0;
    const TensorView& dst = second ? dst1 : dst0;
    const TensorView& a = second ? a1 : a0;
    int64_t i[4];
    Unravel(k, dst.ne, i);
    const char* row = a.data + Offset(a, 0, i[1], i[2], i[3]);
    const float x = *reinterpret_cast<const float*>(row + i[0] * a.nb[0]);
    if (i[0] >= args.n_dims) {
      F32At(dst, i) = x;
      continue;
    }
    const RopePair p = RopePairOf(args, static_cast<int>(i[0]));
    const float xp = *reinterpret_cast<const float*>(row + p.partner * a.nb[0]);
    const int32_t position = *reinterpret_cast<const int32_t*>(pos.data + i[2] * pos.nb[0]);
    const float factor =
        has_ff ? *reinterpret_cast<const float*>(ff.data + p.pair * ff.nb[0]) : 1.0f;
    float c, s;
    RopeCosSin(args, p.pair, factor, position, &c, &s);
    F32At(dst, i) = RopeRotate(p.first, x, xp, c, s);
  }
}

struct ArgmaxCandidate {
  float v;
  int64_t i;  // INT64_MAX: none yet.
};

__device__ __forceinline__ ArgmaxCandidate Better(ArgmaxCandidate p, ArgmaxCandidate q) {
  if (q.i == INT64_MAX) return p;
  if (p.i == INT64_MAX) return q;
  if (q.v > p.v || (q.v == p.v && q.i < p.i)) return q;
  return p;
}

// One block per row: the first index of the largest value; NaN never wins, a row of NaN
// gives 0.
__global__ void ArgmaxKernel(TensorView dst, TensorView a) {
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  for (int64_t r = blockIdx.x; r < NumRows(a); r += gridDim.x) {
    const char* x = RowPtr(a, r);
    ArgmaxCandidate best{-INFINITY, INT64_MAX};
    for (int64_t i = threadIdx.x; i < a.ne[0]; i += blockDim.x) {
      const float v = *reinterpret_cast<const float*>(x + i * a.nb[0]);
      if (!isnan(v)) best = Better(best, {v, i});
    }
    for (int o = 16; o > 0; o >>= 1) {
      const ArgmaxCandidate other{__shfl_xor_sync(kFullMask, best.v, o),
                                  __shfl_xor_sync(kFullMask, best.i, o)};
      best = Better(best, other);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
      sv[warp] = best.v;
      si[warp] = best.i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      ArgmaxCandidate all{sv[0], si[0]};
      for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) all = Better(all, {sv[w], si[w]});
      *reinterpret_cast<int32_t*>(RowPtr(dst, r)) =
          all.i == INT64_MAX ? 0 : static_cast<int32_t>(all.i);
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t CheckKernelImage() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, BinaryKernel);
}

cudaError_t LaunchBinary(BinaryOp op, const TensorView& dst, const TensorView& a,
                         const TensorView& b, cudaStream_t stream) {
  const int64_t n = NumElements(dst);
  return LaunchOn(ElementwiseLaunch(n), stream, BinaryKernel, op, dst, a, b, n);
}

cudaError_t LaunchUnary(UnaryOp op, float p0, float p1, const TensorView& dst, const TensorView& a,
                        cudaStream_t stream) {
  const int64_t n = NumElements(dst);
  return LaunchOn(ElementwiseLaunch(n), stream, UnaryKernel, op, p0, p1, dst, a, n);
}

cudaError_t LaunchSwiglu(const TensorView& dst, const TensorView& gate, const TensorView& up,
                         cudaStream_t stream) {
  const int64_t n = NumElements(dst);
  return LaunchOn(ElementwiseLaunch(n), stream, SwigluKernel, dst, gate, up, n);
}

cudaError_t LaunchRmsNorm(const TensorView& dst, const TensorView& a, float eps,
                          cudaStream_t stream) {
  return LaunchOn(RowLaunch(NumRows(a), a.ne[0]), stream, RmsNormKernel, dst, a, eps);
}

cudaError_t LaunchSoftMax(const TensorView& dst, const TensorView& a, const TensorView* mask,
                          float scale, cudaStream_t stream) {
  return LaunchOn(RowLaunch(NumRows(a), a.ne[0]), stream, SoftMaxKernel, dst, a,
                  mask != nullptr ? *mask : TensorView{}, mask != nullptr, scale);
}

cudaError_t LaunchRmsNormMul(const TensorView& dst, const TensorView& a, const TensorView& w,
                             float eps, cudaStream_t stream) {
  return LaunchOn(RowLaunch(NumRows(a), a.ne[0]), stream, RmsNormMulKernel, dst, a, w, eps);
}

cudaError_t LaunchRope(const TensorView& dst, const TensorView& a, const TensorView& pos,
                       const TensorView* ff, const RopeArgs& args, cudaStream_t stream) {
  const int64_t n = NumElements(dst);
  return LaunchOn(ElementwiseLaunch(n), stream, RopeKernel, dst, a, TensorView{}, TensorView{}, pos,
                  ff != nullptr ? *ff : TensorView{}, ff != nullptr, args, n, int64_t{0});
}

cudaError_t LaunchRopePair(const TensorView& dst0, const TensorView& a0, const TensorView& dst1,
                           const TensorView& a1, const TensorView& pos, const TensorView* ff,
                           const RopeArgs& args, cudaStream_t stream) {
  const int64_t n0 = NumElements(dst0), n1 = NumElements(dst1);
  return LaunchOn(ElementwiseLaunch(n0 + n1), stream, RopeKernel, dst0, a0, dst1, a1, pos,
                  ff != nullptr ? *ff : TensorView{}, ff != nullptr, args, n0, n1);
}

cudaError_t LaunchArgmax(const TensorView& dst, const TensorView& a, cudaStream_t stream) {
  return LaunchOn(RowLaunch(NumRows(a), a.ne[0]), stream, ArgmaxKernel, dst, a);
}

}  // namespace tg::cuda
