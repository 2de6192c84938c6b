// The int8 tile matrix multiply of quantized weights (as ggml's MMQ; mmq_tile.h says the
// math): a block computes 64 weight rows x 64 activation columns. Per K stage of 256 (8 groups
// of 32), its 128 threads unpack the weight groups to int8 with their scales and copy the
// Q8_1 activation blocks into shared memory; each warp then runs int8 tensor-core products
// for its 16 rows against all 64 columns, two per group (quants 0..15 and 16..31, which
// Q6_K, Q3_K and Q2_K scale separately), and folds each group's integer sums into f32
// accumulators with the group's scales (GroupUpdateOf). The activations are the matrix-vector
// kernel's Q8_1 blocks, so the integers are the CPU's; only the f32 summation order differs.
#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/mmq_tile.h"

namespace tg::cuda {
namespace {

constexpr int kWarpRows = 16;            // rows per warp.
constexpr int kColFrags = kMmqCols / 8;  // n-fragments of 8 columns.
constexpr int kUnitsPerThread = kMmqRows * kMmqGroups / kMmqThreads;
static_assert(kMmqRows == kWarpRows * (kMmqThreads / 32), "one 16-row strip per warp");
static_assert(kMmqRows == kMmqCols, "the loaders cover rows and columns alike");

template <int kType>
struct TileShared {
  alignas(16) int8_t a[kMmqRows * kMmqRowBytes];  // weights, int8.
  alignas(16) int8_t b[kMmqCols * kMmqRowBytes];  // activations, int8.
  GroupScales w_scales[kMmqRows][kMmqGroups];
  float a_d[kMmqCols][kMmqGroups];
  int a_sum[kMmqCols][kMmqGroups];
  // Sums of quants 16..31 (|sum| <= 16 * 127), for HasSplitMins types only.
  int16_t a_sum_hi[HasSplitMins(kType) ? kMmqCols : 1][kMmqGroups];
};

template <int kType>
__device__ void LoadStage(TileShared<kType>& s, const MmqArgs& p, const char* w, const char* act,
                          int64_t row0, int64_t col0, int64_t g0) {
  const int64_t n_groups = p.k / 32;
#pragma unroll
  for (int i = 0; i < kUnitsPerThread; ++i) {
    const int u = threadIdx.x + kMmqThreads * i, r = u / kMmqGroups, gg = u % kMmqGroups;
    uint32_t q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    GroupScales sc{0.0f, 0.0f, 0.0f, 0.0f};
    if (row0 + r < p.m && g0 + gg < n_groups) {
      sc = UnpackGroup32(kType, w + (row0 + r) * p.w_nb1, g0 + gg, q);
    }
    uint4* dst = reinterpret_cast<uint4*>(s.a + r * kMmqRowBytes + gg * 32);
    dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
    dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
    s.w_scales[r][gg] = sc;
  }
#pragma unroll
  for (int i = 0; i < kUnitsPerThread; ++i) {
    const int u = threadIdx.x + kMmqThreads * i, c = u / kMmqGroups, gg = u % kMmqGroups;
    uint32_t q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float d = 0.0f;
    int sum = 0;
    if (col0 + c < p.n && g0 + gg < n_groups) {
      const BlockQ8_1& blk =
          reinterpret_cast<const BlockQ8_1*>(act + (col0 + c) * p.act_col_bytes)[g0 + gg];
#pragma unroll
      for (int w4 = 0; w4 < 8; ++w4) q[w4] = static_cast<uint32_t>(LoadQ8x4(blk.qs + 4 * w4));
      d = blk.d;
      sum = blk.sum;
    }
    uint4* dst = reinterpret_cast<uint4*>(s.b + c * kMmqRowBytes + gg * 32);
    dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
    dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
    s.a_d[c][gg] = d;
    s.a_sum[c][gg] = sum;
    if constexpr (HasSplitMins(kType)) {
      int sum_hi = 0;
#pragma unroll
      for (int w4 = 4; w4 < 8; ++w4) sum_hi = Dp4a(0x01010101, static_cast<int>(q[w4]), sum_hi);
      s.a_sum_hi[c][gg] = static_cast<int16_t>(sum_hi);
    }
  }
}

// One K stage of this warp's 16 x 64 strip: two int8 products per group, then the update.
template <int kType>
__device__ void ComputeStage(const TileShared<kType>& s, float (&acc)[kColFrags][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int8_t* a_rows = s.a + (warp * kWarpRows + g) * kMmqRowBytes + 4 * t;
  const int8_t* b_cols = s.b + g * kMmqRowBytes + 4 * t;
#pragma unroll 1
  for (int gg = 0; gg < kMmqGroups; ++gg) {
    int lo[kColFrags][4] = {}, hi[kColFrags][4] = {};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int k0 = gg * 32 + half * 16;
      // MmaS8A: register r holds row g + 8 r, K 4t .. 4t + 3 (one aligned word).
      const uint32_t a0 = *reinterpret_cast<const uint32_t*>(a_rows + k0);
      const uint32_t a1 = *reinterpret_cast<const uint32_t*>(a_rows + 8 * kMmqRowBytes + k0);
#pragma unroll
      for (int f = 0; f < kColFrags; ++f) {
        // MmaS8B: column g of fragment f, K 4t .. 4t + 3.
        const uint32_t b = *reinterpret_cast<const uint32_t*>(b_cols + 8 * f * kMmqRowBytes + k0);
        if (half == 0) {
          MmaS8(lo[f], a0, a1, b);
        } else {
          MmaS8(hi[f], a0, a1, b);
        }
      }
    }
    const GroupScales w_lo = s.w_scales[warp * kWarpRows + g][gg];
    const GroupScales w_hi = s.w_scales[warp * kWarpRows + g + 8][gg];
#pragma unroll
    for (int f = 0; f < kColFrags; ++f) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const RowCol rc = MmaC(lane, i);
        const int c = 8 * f + rc.col;
        int sum_hi = 0;
        if constexpr (HasSplitMins(kType)) sum_hi = s.a_sum_hi[c][gg];
        acc[f][i] += GroupUpdateOf(kType, lo[f][i], hi[f][i], i < 2 ? w_lo : w_hi, s.a_d[c][gg],
                                   s.a_sum[c][gg], sum_hi);
      }
    }
  }
}

template <int kType>
__global__ void __launch_bounds__(kMmqThreads) MmqKernel(MmqArgs p) {
  __shared__ TileShared<kType> s;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmqRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kMmqCols;
  const int64_t bt = blockIdx.z, j2 = bt % p.b2, j3 = bt / p.b2;
  const char* w = p.w + (j2 / p.r2) * p.w_nb2 + (j3 / p.r3) * p.w_nb3;
  const char* act = p.act + bt * p.n * p.act_col_bytes;
  float acc[kColFrags][4] = {};
  for (int64_t g0 = 0; g0 < p.k / 32; g0 += kMmqGroups) {
    LoadStage<kType>(s, p, w, act, row0, col0, g0);
    __syncthreads();
    ComputeStage<kType>(s, acc);
    __syncthreads();  // the stage is read before the next one is written.
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  char* dst = reinterpret_cast<char*>(p.dst) + j2 * p.dst_nb2 + j3 * p.dst_nb3;
#pragma unroll
  for (int f = 0; f < kColFrags; ++f) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const RowCol rc = MmaC(lane, i);
      const int64_t row = row0 + warp * kWarpRows + rc.row, col = col0 + 8 * f + rc.col;
      if (row < p.m && col < p.n) {
        reinterpret_cast<float*>(dst + col * p.dst_nb1)[row] = acc[f][i];
      }
    }
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The kernel of each weight type the tiles take.
struct MmqKernelOf {
  int weight_type;
  void (*kernel)(MmqArgs p);
};
constexpr MmqKernelOf kMmqKernels[] = {
    {kTypeQ4_0, MmqKernel<kTypeQ4_0>},     {kTypeQ8_0, MmqKernel<kTypeQ8_0>},
    {kTypeQ4_K, MmqKernel<kTypeQ4_K>},     {kTypeQ6_K, MmqKernel<kTypeQ6_K>},
    {kTypeQ5_0, MmqKernel<kTypeQ5_0>},     {kTypeQ5_1, MmqKernel<kTypeQ5_1>},
    {kTypeQ2_K, MmqKernel<kTypeQ2_K>},     {kTypeQ3_K, MmqKernel<kTypeQ3_K>},
    {kTypeQ5_K, MmqKernel<kTypeQ5_K>},     {kTypeIQ4_NL, MmqKernel<kTypeIQ4_NL>},
    {kTypeIQ4_XS, MmqKernel<kTypeIQ4_XS>}, {kTypeMXFP4, MmqKernel<kTypeMXFP4>},
};

}  // namespace

bool MmqFits(const MmqArgs& args) {
  return CeilDiv(args.m, kMmqRows) <= kMaxGridX && CeilDiv(args.n, kMmqCols) <= kMaxGridYZ &&
         args.b2 * args.b3 <= kMaxGridYZ && args.k % 32 == 0;
}

cudaError_t LaunchMmq(const MmqArgs& args, cudaStream_t stream) {
  if (args.m == 0 || args.n == 0 || args.b2 * args.b3 == 0) return cudaSuccess;
  const dim3 grid(static_cast<uint32_t>(CeilDiv(args.m, kMmqRows)),
                  static_cast<uint32_t>(CeilDiv(args.n, kMmqCols)),
                  static_cast<uint32_t>(args.b2 * args.b3));
  for (const MmqKernelOf& k : kMmqKernels) {
    if (k.weight_type == args.weight_type) {
      k.kernel<<<grid, kMmqThreads, 0, stream>>>(args);
      return LaunchResult();
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace tg::cuda
