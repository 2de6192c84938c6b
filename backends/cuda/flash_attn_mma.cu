// FLASH_ATTN on tensor cores for prompts: a block takes 64 queries of one head (16 per warp)
// and walks the keys in tiles of 64. Per tile its threads copy K (as is) and V (transposed)
// into shared memory; each warp computes its 16 x 64 scores with f16 mma (q rounded to f16,
// as docs/ops.md says for F16 K), applies scale and mask, updates the running max and sum
// of each row in registers (the accumulator layout says which rows a thread holds), and adds
// P V with the probabilities as f16 operands and f32 accumulation. Keys masked for every
// query of the block are never read (zeros take their place), so stale or NaN cache slots
// behind the mask cannot leak in, as in the one-block-per-query kernel; a fully masked row
// gives zeros.
#include <cmath>
#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/mmq_tile.h"

namespace tg::cuda {
namespace {

constexpr int kQueries = 64;  // per block, 16 per warp.
constexpr int kKeys = 64;     // per tile.
constexpr int kThreads = 128;
constexpr int kKeyFrags = kKeys / 8;

template <int D>
struct AttnShared {
  static constexpr int kKStride = D + 8;      // halves per K row (+16 bytes: other banks).
  static constexpr int kVStride = kKeys + 8;  // halves per row of V transposed.
  alignas(16) uint16_t k[kKeys * kKStride];
  alignas(16) uint16_t vt[D * kVStride];
  uint8_t visible[kKeys];
};

__device__ __forceinline__ float MaskAt(const TensorView& mask, bool has_mask, int64_t qi,
                                        int64_t j) {
  return has_mask ? LoadAsF32(mask.type, mask.data + qi * mask.nb[1] + j * mask.nb[0]) : 0.0f;
}

// Copies the tile's K rows and V rows (transposed) into shared memory, zeros for keys that no
// query of the block sees. Returns false when the whole tile is masked.
template <int D>
__device__ bool LoadTile(AttnShared<D>& s, const TensorView& k, const TensorView& v,
                         const TensorView& mask, bool has_mask, int64_t q0, int64_t n_q,
                         int64_t j0, int64_t hk, int64_t b) {
  const int64_t n_kv = k.ne[1];
  if (threadIdx.x < kKeys) {
    const int64_t j = j0 + threadIdx.x;
    bool vis = j < n_kv;
    if (vis && has_mask) {
      vis = false;
      for (int64_t qi = q0; qi < q0 + kQueries && qi < n_q && !vis; ++qi) {
        vis = MaskAt(mask, true, qi, j) != -INFINITY;
      }
    }
    s.visible[threadIdx.x] = vis ? 1 : 0;
  }
  if (!__syncthreads_or(threadIdx.x < kKeys && s.visible[threadIdx.x])) return false;
  constexpr int kWords = D / 2;  // half pairs per row.
  for (int idx = threadIdx.x; idx < kKeys * kWords; idx += kThreads) {
    const int jj = idx / kWords, w = idx % kWords;
    uint32_t kw = 0, vw = 0;
    if (s.visible[jj]) {
      const int64_t j = j0 + jj;
      kw = reinterpret_cast<const uint32_t*>(k.data + Offset(k, 0, j, hk, b))[w];
      vw = reinterpret_cast<const uint32_t*>(v.data + Offset(v, 0, j, hk, b))[w];
    }
    reinterpret_cast<uint32_t*>(s.k + jj * AttnShared<D>::kKStride)[w] = kw;
    s.vt[(2 * w) * AttnShared<D>::kVStride + jj] = static_cast<uint16_t>(vw);
    s.vt[(2 * w + 1) * AttnShared<D>::kVStride + jj] = static_cast<uint16_t>(vw >> 16);
  }
  __syncthreads();
  return true;
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    FlashAttnMmaKernel(TensorView dst, TensorView q, TensorView k, TensorView v, TensorView mask,
                       bool has_mask, float scale) {
  __shared__ AttnShared<D> s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n_q = q.ne[1], n_head = q.ne[2], n_kv = k.ne[1];
  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / (n_head / k.ne[2]);
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kQueries;
  const int64_t qw = q0 + 16 * warp;  // this warp's first query.
  // Q as A fragments (MmaF16A: register r holds query g + 8 (r % 2), d 8 (r / 2) + 2t, +1).
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t qi = qw + g + 8 * (r % 2);
      const int d = 16 * ks + 8 * (r / 2) + 2 * t;
      uint16_t lo = 0, hi = 0;
      if (qi < n_q) {
        const char* row = q.data + Offset(q, 0, qi, h, b);
        lo = F32ToHalf(*reinterpret_cast<const float*>(row + d * q.nb[0]));
        hi = F32ToHalf(*reinterpret_cast<const float*>(row + (d + 1) * q.nb[0]));
      }
      qf[ks][r] = PackHalves(lo, hi);
    }
  }
  float o[D / 8][4] = {};
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g, g + 8.
  for (int64_t j0 = 0; j0 < n_kv; j0 += kKeys) {
    if (j0 > 0) __syncthreads();  // the previous tile is read by every warp.
    if (!LoadTile<D>(s, k, v, mask, has_mask, q0, n_q, j0, hk, b)) continue;
    float sc[kKeyFrags][4] = {};
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f) {
      // MmaF16B: register r holds d 16 ks + 8 r + 2t, +1 of key 8 f + g.
      const uint16_t* krow = s.k + (8 * f + g) * AttnShared<D>::kKStride + 2 * t;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        MmaF16(sc[f], qf[ks], *reinterpret_cast<const uint32_t*>(krow + 16 * ks),
               *reinterpret_cast<const uint32_t*>(krow + 16 * ks + 8));
      }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const RowCol rc = MmaC(lane, i);
        const int64_t qi = qw + rc.row, jj = 8 * f + rc.col, j = j0 + jj;
        float x = -INFINITY;
        if (qi < n_q && s.visible[jj]) {
          const float mv = MaskAt(mask, has_mask, qi, j);
          if (mv != -INFINITY) x = sc[f][i] * scale + mv;
        }
        sc[f][i] = x;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], x);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The four threads of a group hold the same two rows.
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFullMask, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFullMask, tile_max[r], 2));
      const float m_new = fmaxf(m_run[r], tile_max[r]);
      alpha[r] = m_new == -INFINITY ? 1.0f : expf(m_run[r] - m_new);  // 0 while m_run is -inf.
      m_run[r] = m_new;
      l_run[r] *= alpha[r];
    }
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = sc[f][i] == -INFINITY ? 0.0f : expf(sc[f][i] - m_run[i / 2]);
        sc[f][i] = p;
        l_run[i / 2] += p;
      }
    }
#pragma unroll
    for (int f = 0; f < D / 8; ++f) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[f][i] *= alpha[i / 2];
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      // The scores' accumulator layout is the A layout of P: fragments 2kk and 2kk + 1.
      const uint32_t pa[4] = {
          PackHalves(F32ToHalf(sc[2 * kk][0]), F32ToHalf(sc[2 * kk][1])),
          PackHalves(F32ToHalf(sc[2 * kk][2]), F32ToHalf(sc[2 * kk][3])),
          PackHalves(F32ToHalf(sc[2 * kk + 1][0]), F32ToHalf(sc[2 * kk + 1][1])),
          PackHalves(F32ToHalf(sc[2 * kk + 1][2]), F32ToHalf(sc[2 * kk + 1][3]))};
#pragma unroll
      for (int f = 0; f < D / 8; ++f) {
        const uint16_t* vrow = s.vt + (8 * f + g) * AttnShared<D>::kVStride + 16 * kk + 2 * t;
        MmaF16(o[f], pa, *reinterpret_cast<const uint32_t*>(vrow),
               *reinterpret_cast<const uint32_t*>(vrow + 8));
      }
    }
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    inv[r] = l > 0.0f ? 1.0f / l : 0.0f;
  }
#pragma unroll
  for (int f = 0; f < D / 8; ++f) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const RowCol rc = MmaC(lane, i);
      const int64_t qi = qw + rc.row;
      if (qi >= n_q) continue;
      char* out = dst.data + Offset(dst, 0, h, qi, b);
      *reinterpret_cast<float*>(out + (8 * f + rc.col) * dst.nb[0]) = o[f][i] * inv[i / 2];
    }
  }
}

}  // namespace

bool FlashAttnMmaFits(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& dst) {
  const int64_t d = q.ne[0];
  if ((d != 64 && d != 128) || k.ne[0] != d || v.ne[0] != d) return false;
  if (k.type != kTypeF16 || v.type != kTypeF16 || q.type != kTypeF32 || dst.type != kTypeF32) {
    return false;
  }
  if (k.ne[2] == 0 || q.ne[2] % k.ne[2] != 0 || k.ne[2] != v.ne[2] || k.ne[1] != v.ne[1]) {
    return false;
  }
  // K and V rows are read as 32-bit words.
  for (const TensorView* t : {&k, &v}) {
    if (reinterpret_cast<uintptr_t>(t->data) % 4 != 0 || t->nb[0] != 2) return false;
    for (int i = 1; i < 4; ++i) {
      if (t->nb[i] % 4 != 0) return false;
    }
  }
  return q.ne[2] <= kMaxGridYZ && q.ne[3] <= kMaxGridYZ;
}

cudaError_t LaunchFlashAttnMma(const TensorView& dst, const TensorView& q, const TensorView& k,
                               const TensorView& v, const TensorView* mask, float scale,
                               cudaStream_t stream) {
  const dim3 grid(static_cast<uint32_t>((q.ne[1] + kQueries - 1) / kQueries),
                  static_cast<uint32_t>(q.ne[2]), static_cast<uint32_t>(q.ne[3]));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  const TensorView m = mask != nullptr ? *mask : TensorView{};
  if (q.ne[0] == 64) {
    FlashAttnMmaKernel<64><<<grid, kThreads, 0, stream>>>(dst, q, k, v, m, mask != nullptr, scale);
  } else {
    FlashAttnMmaKernel<128><<<grid, kThreads, 0, stream>>>(dst, q, k, v, m, mask != nullptr, scale);
  }
  return LaunchResult();
}

}  // namespace tg::cuda
