// The matrix-vector kernel of MUL_MAT (decode: up to kMatVecMaxCols activation columns) and
// MUL_MAT_ID (one column per slot and token, each with its expert), tuned per weight layout
// (launch_geometry.h's PlanMatVec): a block covers 1, 2 or 4 rows, 4, 2 or 1 warps each.
//   Quantized weights (blocks of 17 to 210 bytes, 2-byte aligned at best, MXFP4's at odd
//   addresses): the block's rows are staged into shared memory with coalesced 16-byte loads
//   (in segments of whole blocks for long rows), then each lane takes 32-quant units and meets
//   the Q8_1 activations with integer dot products (quant_math.h's UnitDot).
//   F32/F16/BF16 weights: each lane reads 8 elements per 16-byte vector (scalar where a row
//   is not 16-byte aligned) against the f32 activations.
// Each weight byte is read once per pass and met by every column. The same unit split and a
// fixed reduction order make the result independent of gate/up fusion: the fused kernel
// stages both matrices' rows and writes silu(gate) * up, equal to SWIGLU over the two
// separate products.
#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch_geometry.h"

namespace tg::cuda {
namespace {

// What a block's batch works on: the weight matrix (and up matrix), the activation column
// and result column, or nothing (an expert id out of range: zeros, and a report unless the
// id belongs to another device's expert range).
struct BatchTarget {
  const char* w;
  const char* w_up;
  int64_t act_col, dst_col;
  int n_cols;
  bool valid;
};

__device__ BatchTarget TargetOf(const MatVecArgs& p, int64_t bt) {
  BatchTarget t{nullptr, nullptr, 0, 0, p.n_cols, true};
  if (p.ids == nullptr) {
    const int64_t j2 = bt % p.b2, j3 = bt / p.b2;
    const int64_t off = (j2 / p.r2) * p.w_nb2 + (j3 / p.r3) * p.w_nb3;
    t.w = p.w + off;
    t.w_up = p.w_up != nullptr ? p.w_up + off : nullptr;
    t.act_col = t.dst_col = bt * p.cols_per_batch + p.col0;
    return t;
  }
  const int64_t i = bt % p.n_used, tok = bt / p.n_used;
  const int32_t id = *reinterpret_cast<const int32_t*>(p.ids + i * p.ids_nb0 + tok * p.ids_nb1);
  const int64_t e = static_cast<int64_t>(id) - p.expert_first;
  t.dst_col = bt;
  t.n_cols = 1;
  if (e < 0 || e >= p.n_expert) {
    t.valid = false;
    if (!p.expert_range && threadIdx.x == 0) ReportError(p.err, kBadExpertId, id, p.n_expert);
    return t;
  }
  t.w = p.w + e * p.w_nb2;
  t.act_col = (i % p.act_per_token) + p.act_per_token * tok;
  return t;
}

// Copies bytes [offset, offset + bytes) of rows row0 .. row0 + R - 1 of each matrix into their
// shared-memory slots: 16-byte vectors where the plan allows, the tail in 2-byte pieces and,
// for an odd count (MXFP4's 17-byte blocks), one last byte.
__device__ void StageRows(unsigned char* stage, const char* w0, const char* w1, int n_mats,
                          const MatVecArgs& p, const MatVecPlan& plan, int64_t row0, int64_t offset,
                          int bytes) {
  const int R = plan.rows_per_block;
  const int vecs = plan.stage_vec == 16 ? bytes / 16 : 0;
  const int n_slots = n_mats * R;
  for (int idx = threadIdx.x; idx < n_slots * vecs; idx += blockDim.x) {
    const int slot = idx / vecs, v = idx % vecs, lr = slot % R;
    if (row0 + lr >= p.m) continue;
    const char* src = (slot < R ? w0 : w1) + (row0 + lr) * p.w_nb1 + offset;
    reinterpret_cast<uint4*>(stage + slot * plan.slot_bytes)[v] =
        reinterpret_cast<const uint4*>(src)[v];
  }
  const int tail = (bytes - 16 * vecs) / 2;
  for (int idx = threadIdx.x; idx < n_slots * tail; idx += blockDim.x) {
    const int slot = idx / tail, h = idx % tail, lr = slot % R;
    if (row0 + lr >= p.m) continue;
    const char* src = (slot < R ? w0 : w1) + (row0 + lr) * p.w_nb1 + offset + 16 * vecs;
    reinterpret_cast<uint16_t*>(stage + slot * plan.slot_bytes + 16 * vecs)[h] =
        reinterpret_cast<const uint16_t*>(src)[h];
  }
  if (bytes % 2 == 0) return;
  for (int slot = threadIdx.x; slot < n_slots; slot += blockDim.x) {
    const int lr = slot % R;
    if (row0 + lr >= p.m) continue;
    const char* src = (slot < R ? w0 : w1) + (row0 + lr) * p.w_nb1 + offset + bytes - 1;
    stage[slot * plan.slot_bytes + bytes - 1] = *reinterpret_cast<const unsigned char*>(src);
  }
}

// Sums each row's partial results over its warps (fixed order) and writes them; with two
// matrices the result is silu(first) * second.
template <int kMats>
__device__ void ReduceAndStore(float (&acc)[kMats][kMatVecMaxCols], const MatVecArgs& p,
                               const MatVecPlan& plan, const BatchTarget& t, int64_t row0) {
  __shared__ float partial[kMatVecWarps][kMats][kMatVecMaxCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int c = 0; c < kMatVecMaxCols; ++c) {
      const float v = WarpSum(acc[m][c]);
      if (lane == 0) partial[warp][m][c] = v;
    }
  }
  __syncthreads();
  const int R = plan.rows_per_block, parts = kMatVecWarps / R;
  if (warp >= R || lane >= t.n_cols) return;
  const int64_t row = row0 + warp;  // warp r writes row r of the block, column `lane`.
  if (row >= p.m) return;
  float sums[kMats];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
    sums[m] = partial[warp * parts][m][lane];
    for (int q = 1; q < parts; ++q) sums[m] += partial[warp * parts + q][m][lane];
  }
  float out = sums[0];
  if constexpr (kMats == 2) out = Silu(sums[0]) * sums[1];
  p.dst[(t.dst_col + lane) * p.m + row] = out;
}

template <int kType, int kMats>
__global__ void __launch_bounds__(kMatVecWarps * 32)
    MatVecQuantKernel(MatVecArgs p, MatVecPlan plan) {
  extern __shared__ uint4 stage_words[];
  unsigned char* stage = reinterpret_cast<unsigned char*>(stage_words);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int R = plan.rows_per_block, parts = kMatVecWarps / R;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  const int64_t row = MatVecRow(blockIdx.x, warp, R), lr = row - row0;
  const int part = MatVecRowPart(warp, R);
  const int64_t bt = BatchIndex(blockIdx.y, blockIdx.z, gridDim.y);
  if (bt >= p.n_batch) return;  // block-uniform.
  const BatchTarget t = TargetOf(p, bt);
  if (!t.valid) {  // block-uniform: the column is zeros.
    for (int64_t r = row0 + threadIdx.x; r < row0 + R && r < p.m; r += blockDim.x) {
      p.dst[t.dst_col * p.m + r] = 0.0f;
    }
    return;
  }
  const int64_t bb = BlockBytesOf(kType), units_per_block = BlockElems(kType) / 32;
  const int64_t row_blocks = p.k / BlockElems(kType);
  const auto* act = reinterpret_cast<const BlockQ8_1*>(p.act + t.act_col * p.act_col_bytes);
  const int64_t act_col_blocks = p.act_col_bytes / static_cast<int64_t>(sizeof(BlockQ8_1));
  float acc[kMats][kMatVecMaxCols] = {};
  for (int64_t seg = 0; seg < row_blocks; seg += plan.seg_blocks) {
    const int64_t n_blk = min(plan.seg_blocks, row_blocks - seg);
    if (seg > 0) __syncthreads();  // everyone has read the previous segment.
    StageRows(stage, t.w, t.w_up, kMats, p, plan, row0, seg * bb, static_cast<int>(n_blk * bb));
    __syncthreads();
    if (row >= p.m) continue;
    const BlockQ8_1* a = act + seg * units_per_block;
    for (int64_t u = part * 32 + lane; u < n_blk * units_per_block; u += parts * 32) {
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const char* w = reinterpret_cast<const char*>(stage + (m * R + lr) * plan.slot_bytes);
#pragma unroll
        for (int c = 0; c < kMatVecMaxCols; ++c) {
          if (c < t.n_cols) acc[m][c] += UnitDot<kType>(w, u, a[c * act_col_blocks + u]);
        }
      }
    }
  }
  ReduceAndStore<kMats>(acc, p, plan, t, row0);
}

template <int kType>
__device__ __forceinline__ void LoadF32x8(const char* row, int64_t v, float out[8]) {
  if constexpr (kType == kTypeF32) {
    const float4 a = reinterpret_cast<const float4*>(row)[2 * v];
    const float4 b = reinterpret_cast<const float4*>(row)[2 * v + 1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const uint4 q = reinterpret_cast<const uint4*>(row)[v];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const auto lo = static_cast<uint16_t>(words[i]), hi = static_cast<uint16_t>(words[i] >> 16);
      out[2 * i] = kType == kTypeF16 ? HalfToF32(lo) : BF16ToF32(lo);
      out[2 * i + 1] = kType == kTypeF16 ? HalfToF32(hi) : BF16ToF32(hi);
    }
  }
}

template <int kType>
__global__ void __launch_bounds__(kMatVecWarps * 32)
    MatVecFloatKernel(MatVecArgs p, MatVecPlan plan) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int R = plan.rows_per_block, parts = kMatVecWarps / R;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  const int64_t row = MatVecRow(blockIdx.x, warp, R);
  const int part = MatVecRowPart(warp, R);
  const int64_t bt = BatchIndex(blockIdx.y, blockIdx.z, gridDim.y);
  if (bt >= p.n_batch) return;
  const BatchTarget t = TargetOf(p, bt);
  if (!t.valid) {
    for (int64_t r = row0 + threadIdx.x; r < row0 + R && r < p.m; r += blockDim.x) {
      p.dst[t.dst_col * p.m + r] = 0.0f;
    }
    return;
  }
  float acc[1][kMatVecMaxCols] = {};
  if (row < p.m) {
    const char* w = t.w + row * p.w_nb1;
    const char* act = p.act + t.act_col * p.act_col_bytes;
    const int first = part * 32 + lane, stride = parts * 32;
    if (plan.stage_vec == 16) {
      for (int64_t v = first; v < p.k / 8; v += stride) {
        float wv[8];
        LoadF32x8<kType>(w, v, wv);
#pragma unroll
        for (int c = 0; c < kMatVecMaxCols; ++c) {
          if (c >= t.n_cols) break;
          float av[8];
          LoadF32x8<kTypeF32>(act + c * p.act_col_bytes, v, av);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[0][c] += wv[i] * av[i];
        }
      }
    } else {
      constexpr int kEs = kType == kTypeF32 ? 4 : 2;
      for (int64_t e = first; e < p.k; e += stride) {
        const float wv = LoadAsF32(kType, w + e * kEs);
#pragma unroll
        for (int c = 0; c < kMatVecMaxCols; ++c) {
          if (c < t.n_cols) {
            acc[0][c] += wv * reinterpret_cast<const float*>(act + c * p.act_col_bytes)[e];
          }
        }
      }
    }
  }
  ReduceAndStore<1>(acc, p, plan, t, row0);
}

template <typename Kernel>
cudaError_t Run(Kernel kernel, const MatVecArgs& args, const MatVecPlan& plan,
                cudaStream_t stream) {
  const Launch l = MatVecLaunch(args.m, args.n_batch, plan.rows_per_block);
  if (l.empty()) return cudaSuccess;
  kernel<<<dim3(l.grid.x, l.grid.y, l.grid.z), dim3(l.block.x),
           static_cast<size_t>(plan.smem_bytes), stream>>>(args, plan);
  return LaunchResult();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int kType>
cudaError_t LaunchQuant(const MatVecArgs& args, bool aligned, cudaStream_t stream) {
  if (args.w_up != nullptr) {
    const MatVecPlan plan = PlanMatVec(kType, args.k, aligned && Aligned16(args.w_up), 2);
    return Run(MatVecQuantKernel<kType, 2>, args, plan, stream);
  }
  return Run(MatVecQuantKernel<kType, 1>, args, PlanMatVec(kType, args.k, aligned, 1), stream);
}

template <int kType>
cudaError_t LaunchFloat(const MatVecArgs& args, bool aligned, cudaStream_t stream) {
  const bool vec =
      aligned && args.k % 8 == 0 && Aligned16(args.act) && args.act_col_bytes % 16 == 0;
  return Run(MatVecFloatKernel<kType>, args, PlanMatVec(kType, args.k, vec, 1), stream);
}

// The launcher of each weight type the kernels take.
struct MatVecLauncher {
  int weight_type;
  cudaError_t (*launch)(const MatVecArgs& args, bool aligned, cudaStream_t stream);
};
constexpr MatVecLauncher kMatVecLaunchers[] = {
    {kTypeF32, LaunchFloat<kTypeF32>},       {kTypeF16, LaunchFloat<kTypeF16>},
    {kTypeBF16, LaunchFloat<kTypeBF16>},     {kTypeQ4_0, LaunchQuant<kTypeQ4_0>},
    {kTypeQ8_0, LaunchQuant<kTypeQ8_0>},     {kTypeQ4_K, LaunchQuant<kTypeQ4_K>},
    {kTypeQ6_K, LaunchQuant<kTypeQ6_K>},     {kTypeQ5_0, LaunchQuant<kTypeQ5_0>},
    {kTypeQ5_1, LaunchQuant<kTypeQ5_1>},     {kTypeQ2_K, LaunchQuant<kTypeQ2_K>},
    {kTypeQ3_K, LaunchQuant<kTypeQ3_K>},     {kTypeQ5_K, LaunchQuant<kTypeQ5_K>},
    {kTypeIQ4_NL, LaunchQuant<kTypeIQ4_NL>}, {kTypeIQ4_XS, LaunchQuant<kTypeIQ4_XS>},
    {kTypeMXFP4, LaunchQuant<kTypeMXFP4>},
};

}  // namespace

cudaError_t LaunchMatVec(const MatVecArgs& args, cudaStream_t stream) {
  // Every row of every matrix (and expert) starts 16-byte aligned.
  const bool aligned =
      Aligned16(args.w) && args.w_nb1 % 16 == 0 && args.w_nb2 % 16 == 0 && args.w_nb3 % 16 == 0;
  for (const MatVecLauncher& l : kMatVecLaunchers) {
    if (l.weight_type == args.weight_type) return l.launch(args, aligned, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tg::cuda
