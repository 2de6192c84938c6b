// Launch shapes of the CUDA kernels, as plain C++ so that unit tests check them for odd and
// huge sizes without a GPU. Every 1-D launch is a grid-stride loop (a kernel walks items
// blockIdx.x, blockIdx.x + gridDim.x, ...), so grids can be capped at the hardware limits;
// 2-D launches put a batch index into (y, z) with BatchIndex. Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_LAUNCH_GEOMETRY_H_
#define TENSORGRID_BACKENDS_CUDA_LAUNCH_GEOMETRY_H_

#include <cstdint>

#include "backends/cuda/host_device.h"

namespace tg::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr int kMaxBlockThreads = 1024;     // every CUDA GPU since sm_20.
inline constexpr int64_t kMaxGridX = 2147483647;  // 2^31 - 1.
inline constexpr int64_t kMaxGridYZ = 65535;
// Elementwise kernels stop adding blocks here: enough to fill any current GPU several times
// over; the grid-stride loop takes the rest.
inline constexpr int64_t kMaxElementwiseBlocks = 1 << 16;
inline constexpr int kElementwiseThreads = 256;
// Warps (one output row each) per block of the matrix-vector kernel.
inline constexpr int kMatVecWarps = 4;
// Warps (one group of quants each) per block of the activation quantizer.
inline constexpr int kQuantizeWarps = 4;
// Threads per block of the flash attention kernel (one block per query row and head).
inline constexpr int kFlashAttnThreads = 128;

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct Launch {
  Dim3 grid;
  Dim3 block;
  // True when there is nothing to do (the kernel must not be launched: a 0 grid is an error).
  bool empty() const { return grid.x == 0 || grid.y == 0 || grid.z == 0; }
};

// n independent items, kElementwiseThreads per block.
Launch ElementwiseLaunch(int64_t n);

// One block per row (grid-stride over rows) for row reductions: the threads are a power of
// two from one warp up to kMaxBlockThreads, no more than the row needs.
Launch RowLaunch(int64_t n_rows, int64_t row_len);

// n_units independent units of work of one warp each, `warps` warps per block.
Launch WarpLaunch(int64_t n_units, int warps);

// Matrix-vector: rows of the weight (m) in blocks of kMatVecWarps warps along x; batches
// along y and, past kMaxGridYZ, z. Empty when m or n_batch is 0 or n_batch exceeds what
// (y, z) can address (kMaxGridYZ^2).
Launch MatVecLaunch(int64_t m, int64_t n_batch);

// FLASH_ATTN: one block of kFlashAttnThreads per (query position, head, batch) row.
Launch FlashAttnLaunch(int64_t n_rows);

// The weight row warp `warp` of block `block_x` of a MatVecLaunch computes (may be >= m).
TG_HD int64_t MatVecRow(uint32_t block_x, int warp) {
  return static_cast<int64_t>(block_x) * kMatVecWarps + warp;
}

// The batch a block of a MatVecLaunch works on (may be >= n_batch in the last z slice).
TG_HD int64_t BatchIndex(uint32_t block_y, uint32_t block_z, uint32_t grid_y) {
  return static_cast<int64_t>(block_y) + static_cast<int64_t>(grid_y) * block_z;
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_LAUNCH_GEOMETRY_H_
