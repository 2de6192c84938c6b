#include "backends/cuda/launch_geometry.h"

#include <algorithm>

namespace tg::cuda {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Launch Grid1D(int64_t blocks, int threads) {
  Launch l;
  l.grid.x = static_cast<uint32_t>(std::max<int64_t>(0, blocks));
  l.block.x = static_cast<uint32_t>(threads);
  return l;
}

}  // namespace

Launch ElementwiseLaunch(int64_t n) {
  if (n <= 0) return Grid1D(0, kElementwiseThreads);
  return Grid1D(std::min(CeilDiv(n, kElementwiseThreads), kMaxElementwiseBlocks),
                kElementwiseThreads);
}

Launch RowLaunch(int64_t n_rows, int64_t row_len) {
  int threads = kWarpSize;
  while (threads < kMaxBlockThreads && threads < row_len) threads *= 2;
  if (n_rows <= 0) return Grid1D(0, threads);
  return Grid1D(std::min(n_rows, kMaxGridX), threads);
}

Launch WarpLaunch(int64_t n_units, int warps) {
  if (n_units <= 0) return Grid1D(0, warps * kWarpSize);
  return Grid1D(std::min(CeilDiv(n_units, warps), kMaxGridX), warps * kWarpSize);
}

Launch FlashAttnLaunch(int64_t n_rows) {
  return Grid1D(std::clamp<int64_t>(n_rows, 0, kMaxGridX), kFlashAttnThreads);
}

int64_t MatVecSegmentStep(int weight_type) {
  // Every block size but MXFP4's (17) is even, and 8 blocks of an even size are a multiple of
  // 16 bytes for all of them (18, 22, 24, 34, 84, 110, 136, 144, 176, 210); 17 needs 16.
  const int64_t bb = BlockBytesOf(weight_type);
  return bb * kMatVecSegmentMinBlocks % 16 == 0 ? kMatVecSegmentMinBlocks : 16;
}

MatVecPlan PlanMatVec(int weight_type, int64_t k, bool rows_aligned16, int n_matrices) {
  MatVecPlan p;
  const bool quantized = IsQuantizedType(weight_type);
  // Units per row: 32-quant groups, or 8-element vectors of a float row.
  const int64_t units = quantized ? k / 32 : CeilDiv(k, 8);
  int warps_per_row = 1;
  while (warps_per_row < kMatVecWarps &&
         units >= 2 * warps_per_row * kWarpSize * kMatVecMinUnitsPerLane) {
    warps_per_row *= 2;
  }
  p.rows_per_block = kMatVecWarps / warps_per_row;
  // 16-byte loads only where every row (and, for float rows, the activations) allows them;
  // a float row read in vectors has no scalar tail, so the caller also requires k % 8 == 0.
  p.stage_vec = rows_aligned16 ? 16 : 2;
  if (!quantized) return p;
  const int64_t bb = BlockBytesOf(weight_type);
  const int64_t row_blocks = k / BlockElems(weight_type);
  const int64_t step = MatVecSegmentStep(weight_type);
  const int64_t fit = kMatVecStageBytes / (p.rows_per_block * bb) / step * step;
  p.seg_blocks = std::max<int64_t>(step, std::min(row_blocks, fit));
  if (p.seg_blocks > row_blocks) p.seg_blocks = row_blocks;
  p.slot_bytes = (p.seg_blocks * bb + 15) / 16 * 16;
  p.smem_bytes = p.slot_bytes * p.rows_per_block * n_matrices;
  return p;
}

Launch MatVecLaunch(int64_t m, int64_t n_batch, int rows_per_block) {
  Launch l;
  l.block.x = kMatVecWarps * kWarpSize;
  const int64_t row_blocks = CeilDiv(std::max<int64_t>(m, 0), rows_per_block);
  if (m <= 0 || n_batch <= 0 || n_batch > kMaxGridYZ * kMaxGridYZ || row_blocks > kMaxGridX) {
    l.grid.x = 0;
    return l;
  }
  l.grid.x = static_cast<uint32_t>(row_blocks);
  l.grid.y = static_cast<uint32_t>(std::min(n_batch, kMaxGridYZ));
  l.grid.z = static_cast<uint32_t>(CeilDiv(n_batch, l.grid.y));
  return l;
}

}  // namespace tg::cuda
