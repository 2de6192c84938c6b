// FLASH_ATTN: softmax(scale * q k^T + mask) v with an online softmax, one block per (query
// position, head, batch). Keys come in tiles of kTile: each warp scores kTile / warps keys
// (lanes over the head dimension, a warp sum per key), then every thread updates the running
// max and sum from the tile's scores in shared memory (all in the same order, so they agree)
// and its own output elements. Masked keys (-inf) are never read, so stale or NaN cache
// slots behind the mask cannot leak in; a fully masked row gives zeros. With F16 K, q is
// rounded to F16 first (docs/ops.md).
#include <cmath>
#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch_geometry.h"

namespace tg::cuda {
namespace {

constexpr int kTile = 32;  // keys per softmax update.
constexpr int kWarps = kFlashAttnThreads / 32;
constexpr int kKeysPerWarp = kTile / kWarps;
constexpr int kOutPerThread = kFlashAttnMaxHead / kFlashAttnThreads;  // Dv <= 512.
static_assert(kTile % kWarps == 0, "tiles split evenly over warps");

__device__ __forceinline__ float Kv(const TensorView& t, const char* row, int64_t d) {
  return t.type == kTypeF16 ? HalfToF32(reinterpret_cast<const uint16_t*>(row)[d])
                            : reinterpret_cast<const float*>(row)[d];
}

__global__ void __launch_bounds__(kFlashAttnThreads)
    FlashAttnKernel(TensorView dst, TensorView q, TensorView k, TensorView v, TensorView mask,
                    bool has_mask, float scale) {
  __shared__ float q_s[kFlashAttnMaxHead];
  __shared__ float p_s[kTile];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t d_k = q.ne[0], d_v = v.ne[0], n_q = q.ne[1], n_head = q.ne[2];
  const int64_t n_kv = k.ne[1], group = n_head / k.ne[2];
  const int64_t n_rows = n_q * n_head * q.ne[3];
  for (int64_t flat = blockIdx.x; flat < n_rows; flat += gridDim.x) {
    const int64_t h = flat % n_head, i = (flat / n_head) % n_q, b = flat / (n_head * n_q);
    const int64_t hk = h / group;
    const char* q_row = q.data + Offset(q, 0, i, h, b);
    for (int64_t d = tid; d < d_k; d += blockDim.x) {
      const float x = *reinterpret_cast<const float*>(q_row + d * q.nb[0]);
      q_s[d] = k.type == kTypeF16 ? HalfToF32(F32ToHalf(x)) : x;
    }
    __syncthreads();
    const char* m_row = has_mask ? mask.data + i * mask.nb[1] : nullptr;
    float m = -INFINITY, l = 0.0f;
    float acc[kOutPerThread] = {};
    for (int64_t j0 = 0; j0 < n_kv; j0 += kTile) {
      for (int kk = 0; kk < kKeysPerWarp; ++kk) {  // warp-uniform: j depends on warp and kk.
        const int64_t j = j0 + warp * kKeysPerWarp + kk;
        float s = -INFINITY;
        const float mv =
            j < n_kv && m_row != nullptr ? LoadAsF32(mask.type, m_row + j * mask.nb[0]) : 0.0f;
        if (j < n_kv && mv != -INFINITY) {
          const char* k_row = k.data + Offset(k, 0, j, hk, b);
          float partial = 0.0f;
          for (int64_t d = lane; d < d_k; d += 32) partial += q_s[d] * Kv(k, k_row, d);
          s = scale * WarpSum(partial) + mv;
        }
        if (lane == 0) p_s[warp * kKeysPerWarp + kk] = s;
      }
      __syncthreads();
      float tile_max = -INFINITY;
      for (int jj = 0; jj < kTile; ++jj) tile_max = fmaxf(tile_max, p_s[jj]);
      const float m_new = fmaxf(m, tile_max);
      __syncthreads();  // every thread has read the scores before they become weights.
      if (m_new == -INFINITY) continue;  // nothing visible yet (uniform over the block).
      if (tid < kTile) p_s[tid] = expf(p_s[tid] - m_new);
      __syncthreads();
      const float rescale = expf(m - m_new);  // 0 while m is -inf.
      float tile_sum = 0.0f;
      for (int jj = 0; jj < kTile; ++jj) tile_sum += p_s[jj];
      l = l * rescale + tile_sum;
#pragma unroll
      for (int r = 0; r < kOutPerThread; ++r) {
        const int64_t d = tid + r * kFlashAttnThreads;
        if (d >= d_v) break;
        float o = acc[r] * rescale;
        for (int jj = 0; jj < kTile; ++jj) {
          const float p = p_s[jj];
          if (p != 0.0f) o += p * Kv(v, v.data + Offset(v, 0, j0 + jj, hk, b), d);
        }
        acc[r] = o;
      }
      m = m_new;
      __syncthreads();  // the weights are read before the next tile's scores.
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    char* out = dst.data + Offset(dst, 0, h, i, b);
#pragma unroll
    for (int r = 0; r < kOutPerThread; ++r) {
      const int64_t d = tid + r * kFlashAttnThreads;
      if (d < d_v) *reinterpret_cast<float*>(out + d * dst.nb[0]) = acc[r] * inv;
    }
    __syncthreads();  // q_s is reloaded for the next row.
  }
}

}  // namespace

cudaError_t LaunchFlashAttn(const TensorView& dst, const TensorView& q, const TensorView& k,
                            const TensorView& v, const TensorView* mask, float scale,
                            cudaStream_t stream) {
  const int64_t n_rows = q.ne[1] * q.ne[2] * q.ne[3];
  const Launch l = FlashAttnLaunch(n_rows);
  if (l.empty()) return cudaSuccess;
  FlashAttnKernel<<<dim3(l.grid.x), dim3(l.block.x), 0, stream>>>(
      dst, q, k, v, mask != nullptr ? *mask : TensorView{}, mask != nullptr, scale);
  return LaunchResult();
}

}  // namespace tg::cuda
