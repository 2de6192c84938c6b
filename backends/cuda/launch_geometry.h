// Launch shapes of the CUDA kernels, as plain C++ so that unit tests check them for odd and
// huge sizes without a GPU. Every 1-D launch is a grid-stride loop (a kernel walks items
// blockIdx.x, blockIdx.x + gridDim.x, ...), so grids can be capped at the hardware limits;
// 2-D launches put a batch index into (y, z) with BatchIndex. Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_LAUNCH_GEOMETRY_H_
#define TENSORGRID_BACKENDS_CUDA_LAUNCH_GEOMETRY_H_

#include <cstdint>

#include "backends/cuda/host_device.h"
#include "backends/cuda/kernel_types.h"

namespace tg::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr int kMaxBlockThreads = 1024;     // every CUDA GPU since sm_20.
inline constexpr int64_t kMaxGridX = 2147483647;  // 2^31 - 1.
inline constexpr int64_t kMaxGridYZ = 65535;
// Elementwise kernels stop adding blocks here: enough to fill any current GPU several times
// over; the grid-stride loop takes the rest.
inline constexpr int64_t kMaxElementwiseBlocks = 1 << 16;
inline constexpr int kElementwiseThreads = 256;
// Warps per block of the matrix-vector kernel; a weight row gets 1, 2 or all 4 of them.
inline constexpr int kMatVecWarps = 4;
// Shared memory per weight matrix of a matrix-vector block for its staged rows: quantized
// rows are copied in with 16-byte loads (whatever the block layout: 17 to 210 bytes)
// and decoded from there. 16 KiB holds a whole Q8_0 row of 14336 (15232 bytes); longer rows
// go in segments. With gate/up fused, two matrices stage their rows (32 KiB, under the 48 KiB
// every GPU gives a block without opting in).
inline constexpr int64_t kMatVecStageBytes = 16384;
// A row gets more warps when one warp's lanes would have fewer units (32 quants, or 8 float
// elements) each than this: enough independent loads per lane to keep memory busy.
inline constexpr int64_t kMatVecMinUnitsPerLane = 4;
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

// How a matrix-vector block covers its rows: rows_per_block rows (kMatVecWarps /
// rows_per_block warps each) and, for quantized weights, how the rows are staged in shared
// memory: segments of seg_blocks weight blocks (a multiple of MatVecSegmentStep, which keeps
// segment starts 16-byte aligned; or the whole row), one slot of slot_bytes per row and
// matrix, copied in stage_vec-byte loads (16 when every row starts 16-byte aligned, else 2).
// Float weights are read directly: 8 elements per 16-byte load when stage_vec is 16, one by
// one otherwise.
struct MatVecPlan {
  int rows_per_block = kMatVecWarps;
  int64_t seg_blocks = 0;  // 0 for float weights (read directly, no staging).
  int64_t slot_bytes = 0;
  int stage_vec = 16;
  int64_t smem_bytes = 0;  // dynamic shared memory of the launch.
};

// Segment lengths of a quantized type's staged rows are multiples of this many blocks: 8 (the
// smallest multiple of 16 bytes for every even block size), 16 for MXFP4's 17-byte blocks.
inline constexpr int64_t kMatVecSegmentMinBlocks = 8;
int64_t MatVecSegmentStep(int weight_type);

// For weights of weight_type with rows of k elements; n_matrices 2 for gate/up fused.
MatVecPlan PlanMatVec(int weight_type, int64_t k, bool rows_aligned16, int n_matrices);

// Matrix-vector: rows of the weight (m) in blocks of rows_per_block rows along x; batches
// along y and, past kMaxGridYZ, z. Empty when m or n_batch is 0 or n_batch exceeds what
// (y, z) can address (kMaxGridYZ^2).
Launch MatVecLaunch(int64_t m, int64_t n_batch, int rows_per_block);

// FLASH_ATTN: one block of kFlashAttnThreads per (query position, head, batch) row.
Launch FlashAttnLaunch(int64_t n_rows);

// The weight row warp `warp` of block `block_x` of a MatVecLaunch works on (may be >= m),
// and that warp's part of the row (0 .. kMatVecWarps / rows_per_block - 1).
TG_HD int64_t MatVecRow(uint32_t block_x, int warp, int rows_per_block) {
  return static_cast<int64_t>(block_x) * rows_per_block + warp / (kMatVecWarps / rows_per_block);
}
TG_HD int MatVecRowPart(int warp, int rows_per_block) {
  return warp % (kMatVecWarps / rows_per_block);
}

// The batch a block of a MatVecLaunch works on (may be >= n_batch in the last z slice).
TG_HD int64_t BatchIndex(uint32_t block_y, uint32_t block_z, uint32_t grid_y) {
  return static_cast<int64_t>(block_y) + static_cast<int64_t>(grid_y) * block_z;
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_LAUNCH_GEOMETRY_H_
