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

Launch MatVecLaunch(int64_t m, int64_t n_batch) {
  Launch l;
  l.block.x = kMatVecWarps * kWarpSize;
  const int64_t row_blocks = CeilDiv(std::max<int64_t>(m, 0), kMatVecWarps);
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
