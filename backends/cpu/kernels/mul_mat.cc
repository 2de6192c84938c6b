// MUL_MAT and MUL_MAT_ID on the CPU.
//
// As in ggml: the f32 activations (src1) are first converted, rows split over the threads,
// into the weight type's activation format (vec_dot.h) in the node's scratch; after a Sync
// the output is computed in tiles of up to kMaxTileRows weight rows (a kernel's streaming_rows
// where that is more: Q4_0) x kMaxTileCols activation rows. F32/F16/BF16 weights with
// many activation rows go to the packed GEMM instead (gemm_f32.h), which reads src1 in place;
// 32-element block weights (Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4; AVX2: not Q4_0) with many
// activation rows to the packed quantized GEMM (qgemm.h), which has its own activation format.
//
// Work split: the output is cut into items (batch, block of activation columns, tile of
// weight rows), and each thread takes a contiguous range of items, in chunks, then steals
// chunks from the back of the others' ranges (ForEachShare). For a matrix-vector product that
// gives each thread a contiguous run of weight rows to stream, told which rows come next so
// that the stream goes on across chunks; with many columns, a block of activations stays in
// L2 while the weight rows stream past it. Fixed halves left a decode's threads waiting for
// each other at 8% of a token on a 2-vCPU Zen 4 VM (whichever core the host slowed for a
// while); taking chunks, 1-2% (Q4_0 2048-wide model: about 5% more tokens a second).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "backends/cpu/kernels/gemm_f32.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/qgemm.h"
#include "backends/cpu/kernels/vec_dot.h"
#include "core/graph.h"

namespace tg::cpu {
namespace {

constexpr size_t kAlign = 64;
// From this many activation rows on, F32/F16/BF16 weights are multiplied by the packed GEMM
// (packing costs about one pass over each operand; tiles cost nothing up front).
constexpr int64_t kGemmMinCols = 16;
constexpr int64_t kGemmMinRows = 32;
// Activation rows converted per column block: what stays in L2 next to the weight tiles.
constexpr size_t kColumnBlockBytes = 256 * 1024;
// Up to this many activation rows, tiles take the kernel's streaming_rows weight rows (1 for
// most quantized types, so each thread reads its weights as one sequential stream: four
// interleaved rows measured at half the DRAM throughput on Zen 4; Q4_0 takes 32 rows on AVX2
// and 16 on AVX-512, at any number of activation rows, and prefetches).
constexpr int64_t kStreamingMaxCols = 16;
// Weight matrices up to this size stay in L3 (32 MiB, shared with the rest of the model)
// after their first use, so decode is bound by the kernels rather than DRAM: tiles of
// kCachedTileRows rows then share each activation load between rows and keep more
// independent accumulators in flight. This holds for a matrix only while the graph's
// weights as a whole fit in the last-level cache: a model of many small matrices (an MoE
// model's experts, a 170 MB llama's 1 MB projections) evicts each before its next use, and
// decoding it four interleaved rows at a time ran at 0.8x of one row after another (tg128,
// AVX2 EPYC with 32 MiB of L3, 2 threads, 4 interleaved rounds: a 173 MB Q8_0 llama 100-106
// against 124-132 t/s, a 230 MB qwen3moe 133-163 against 160-190), while the 25 MB
// stories15M shape, which fits, ran a fifth slower one row at a time (906-1270 against
// 1007-1348).
constexpr size_t kCachedMaxWeightBytes = 16u << 20;
// The L3 where the kernel does not list one (WeightsComeFromMemory).
constexpr size_t kDefaultLastLevelCacheBytes = 32u << 20;
constexpr int64_t kCachedTileRows = 4;
// Rows this short are contiguous enough that a kernel's groups of rows read one stream.
constexpr size_t kMergeMaxStreamingRowBytes = 2048;
// Weight bytes a thread takes at a time from its share of a product's rows (ForEachShare): small
// enough that a thread slowed for a while hands most of its rest to the others, large enough
// that claiming costs nothing next to reading it.
constexpr size_t kShareChunkBytes = 64u << 10;

size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

char* AlignUp(void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<char*>((u + kAlign - 1) / kAlign * kAlign);
}

template <typename T>
T* At(const Tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return reinterpret_cast<T*>(static_cast<char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] +
                              i2 * t->nb[2] + i3 * t->nb[3]);
}

// Where activation row (i1, i2, i3) of src1 lives after conversion (or in src1 itself).
struct ActView {
  const char* data;
  size_t nb1, nb2, nb3;
  const void* Row(int64_t i1, int64_t i2, int64_t i3) const {
    return data + i1 * nb1 + i2 * nb2 + i3 * nb3;
  }
};

bool NeedsConversion(const DotKernels& kern, const Tensor* b) {
  return kern.from_f32 != nullptr || b->nb[0] != sizeof(float);
}

// Bytes between converted rows, for whichever kernel set (SIMD or scalar) runs.
size_t ActStride(DType type, int64_t k) {
  return RoundUp(
      std::max(GetDotKernels(type).act_row_bytes(k), scalar::GetDotKernels(type).act_row_bytes(k)),
      kAlign);
}

// Scratch for converted activations: the rows, then one f32 row per thread for gathering
// rows whose elements are strided.
size_t ActWorkSize(DType type, const Tensor* b, int nth) {
  return kAlign + static_cast<size_t>(b->NumRows()) * ActStride(type, b->ne[0]) +
         static_cast<size_t>(nth) * RoundUp(b->ne[0] * sizeof(float), kAlign);
}

// Converts src1 with `convert` (nullptr: copy as f32) into rows `stride` bytes apart at
// `base` (aligned; threads split the rows), followed by one gather row per thread, then syncs.
ActView ConvertActivations(const ComputeParams& p, char* base, size_t stride,
                           const std::function<void(const float*, void*, int64_t)>& convert,
                           const Tensor* b) {
  const int64_t k = b->ne[0];
  const int64_t rows = b->NumRows();
  float* gather =
      reinterpret_cast<float*>(base + rows * stride + p.ith * RoundUp(k * sizeof(float), kAlign));
  int64_t r0, r1;
  SplitRange(rows, p.ith, p.nth, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i1 = r % b->ne[1], i2 = (r / b->ne[1]) % b->ne[2];
    const int64_t i3 = r / (b->ne[1] * b->ne[2]);
    const float* src = At<const float>(b, 0, i1, i2, i3);
    if (b->nb[0] != sizeof(float)) {
      for (int64_t i = 0; i < k; ++i) gather[i] = *At<const float>(b, i, i1, i2, i3);
      src = gather;
    }
    char* dst = base + r * stride;
    if (convert) {
      convert(src, dst, k);
    } else {
      std::memcpy(dst, src, k * sizeof(float));
    }
  }
  p.Sync();
  return {base, stride, b->ne[1] * stride, b->ne[1] * b->ne[2] * stride};
}

// Converts src1 into the kernels' activation format at `scratch`, then syncs. Returns the
// view to read rows from: src1 itself when it is usable as is (no Sync).
ActView PrepareActivations(const ComputeParams& p, void* scratch, const DotKernels& kern,
                           DType type, const Tensor* b) {
  if (!NeedsConversion(kern, b)) {
    return {static_cast<const char*>(b->data), b->nb[1], b->nb[2], b->nb[3]};
  }
  std::function<void(const float*, void*, int64_t)> convert;
  if (kern.from_f32 != nullptr) convert = kern.from_f32;
  return ConvertActivations(p, AlignUp(scratch), ActStride(type, b->ne[0]), convert, b);
}

// Activation columns per block: as many as fit kColumnBlockBytes, a multiple of the tile.
int64_t ColumnBlock(size_t act_stride, int64_t n) {
  const int64_t fit = static_cast<int64_t>(kColumnBlockBytes / std::max<size_t>(act_stride, 1));
  const int64_t block = std::max<int64_t>(kMaxTileCols, fit / kMaxTileCols * kMaxTileCols);
  return std::min(block, std::max<int64_t>(n, 1));
}

// Bytes of all of src0's matrices: every expert (MUL_MAT_ID) or batch matrix is reused by
// later tokens, so they make up the working set that has to fit in L3 together.
size_t WeightBytes(const Tensor* a) { return static_cast<size_t>(a->NumRows()) * a->nb[1]; }

int64_t TileRows(const ComputeParams& p, const DotKernels& kern, int64_t n, size_t weight_bytes) {
  if (n > kStreamingMaxCols) return std::max<int64_t>(kMaxTileRows, kern.streaming_rows);
  if (!p.weights_from_memory && weight_bytes <= kCachedMaxWeightBytes) {
    return std::max<int64_t>(kern.streaming_rows, kCachedTileRows);
  }
  return kern.streaming_rows;
}

// Runs the tile kernel over weight rows [row0, row0 + rows) and `cols` activation columns
// given by pointers; the ahead_rows after them are likely this thread's next (DotTileFn).
// With tile_rows 1 (weights streamed from DRAM) one row per call, so that the kernel reads
// one sequential stream instead of interleaving a group of rows.
void RunTiles(const DotKernels& kern, int64_t k, const char* a_rows, size_t a_stride, int64_t rows,
              int64_t ahead_rows, int64_t tile_rows, const void* const* b_cols,
              float* const* c_cols, int64_t cols) {
  const int64_t per_call = tile_rows == 1 ? 1 : rows;
  for (int64_t r = 0; r < rows; r += per_call) {
    const int n_rows = static_cast<int>(std::min(per_call, rows - r));
    const int ahead = static_cast<int>(std::min<int64_t>(rows - r - n_rows + ahead_rows, 1 << 30));
    for (int64_t j = 0; j < cols; j += kMaxTileCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kMaxTileCols, cols - j));
      float* c_rows[kMaxTileCols];
      for (int jj = 0; jj < nc; ++jj) c_rows[jj] = c_cols[j + jj] + r;
      kern.tile(k, a_rows + r * a_stride, a_stride, n_rows, ahead, b_cols + j, nc, c_rows);
    }
  }
}

bool UseGemm(const Tensor* a, const Tensor* b) {
  return !ScalarDotKernelsForced() && GemmSupports(a->type) && b->ne[1] >= kGemmMinCols &&
         a->ne[1] >= kGemmMinRows;
}

void MulMatGemm(const ComputeParams& p, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
  for (int64_t i3 = 0; i3 < b->ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < b->ne[2]; ++i2) {
      const GemmA ga{a->type, At<const char>(a, 0, 0, i2 / r2, i3 / r3), a->nb[1]};
      const GemmB gb{At<const char>(b, 0, 0, i2, i3), b->nb[1], b->nb[0]};
      const GemmC gc{At<float>(dst, 0, 0, i2, i3), dst->nb[1]};
      GemmF32(p, p.wdata, a->ne[1], b->ne[1], a->ne[0], ga, gb, gc);
    }
  }
}

// 32-element block weights with many activation rows: packed 16-row tiles (qgemm.h).
// Whether weights `a` go through the packed GEMM for `cols` activation columns per matrix
// (a prefill, not a decode).
bool QGemmTakes(const Tensor* a, int64_t cols) {
  // The packing gathers address a tile's rows with 32-bit offsets.
  return !ScalarDotKernelsForced() && QGemmSupports(a->type) && cols > kStreamingMaxCols &&
         a->nb[1] < (size_t{1} << 26);
}

bool UseQGemm(const Tensor* a, const Tensor* b) { return QGemmTakes(a, b->ne[1]); }

size_t QGemmActStride(int64_t k) { return RoundUp(QGemmActRowBytes(k), kAlign); }

// Scratch: converted activations, one gather row per thread, one packed tile per thread.
size_t QGemmWorkSize(const Tensor* a, const Tensor* b, int nth) {
  const int64_t k = a->ne[0];
  return kAlign + static_cast<size_t>(b->NumRows()) * QGemmActStride(k) +
         static_cast<size_t>(nth) *
             (RoundUp(k * sizeof(float), kAlign) + RoundUp(QGemmPackBytes(k), kAlign));
}

// The packed GEMM's scratch at `scratch` (laid out as QGemmWorkSize counts it): b converted
// to its activation format (all threads, then a Sync), and this thread's packed tile.
struct QGemmScratch {
  ActView act;
  void* pack;
};
QGemmScratch PrepareQGemm(const ComputeParams& p, void* scratch, const Tensor* a, const Tensor* b) {
  const int64_t k = a->ne[0];
  const size_t stride = QGemmActStride(k);
  char* base = AlignUp(scratch);
  const DType type = a->type;
  const ActView act = ConvertActivations(
      p, base, stride,
      [type](const float* x, void* y, int64_t len) { QGemmActFromF32(type, x, y, len); }, b);
  return {act, base + b->NumRows() * stride + p.nth * RoundUp(k * sizeof(float), kAlign) +
                   p.ith * RoundUp(QGemmPackBytes(k), kAlign)};
}

void MulMatQGemm(const ComputeParams& p, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const int64_t k = a->ne[0], m = a->ne[1], n = b->ne[1];
  const DType type = a->type;
  const auto [act, pack] = PrepareQGemm(p, p.wdata, a, b);

  const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
  const int64_t row_tiles = (m + kQGemmRows - 1) / kQGemmRows;
  const int64_t col_block = ColumnBlock(act.nb1, n);
  const int64_t col_blocks = (n + col_block - 1) / col_block;
  const void* b_cols[kQGemmCols];
  float* c_cols[kQGemmCols];
  const auto run = [&](int64_t it0, int64_t it1, int64_t /*ahead_end*/) {
    for (int64_t it = it0; it < it1; ++it) {
      const int64_t rt = it % row_tiles, cb = (it / row_tiles) % col_blocks;
      const int64_t batch = it / (row_tiles * col_blocks);
      const int64_t i2 = batch % b->ne[2], i3 = batch / b->ne[2];
      const int64_t row0 = rt * kQGemmRows;
      const int rows = static_cast<int>(std::min<int64_t>(kQGemmRows, m - row0));
      QGemmPack(type, k, At<const char>(a, 0, row0, i2 / r2, i3 / r3), a->nb[1], rows, pack);
      const int64_t col_end = std::min(n, (cb + 1) * col_block);
      for (int64_t j0 = cb * col_block; j0 < col_end; j0 += kQGemmCols) {
        const int cols = static_cast<int>(std::min<int64_t>(kQGemmCols, col_end - j0));
        for (int j = 0; j < cols; ++j) {
          b_cols[j] = act.Row(j0 + j, i2, i3);
          c_cols[j] = At<float>(dst, row0, j0 + j, i2, i3);
        }
        QGemmTile(type, k, pack, rows, b_cols, cols, c_cols);
      }
    }
  };
  // An item packs its rows and meets a whole block of columns: taken one at a time.
  ForEachShare(p, b->ne[3] * b->ne[2] * col_blocks * row_tiles, /*chunk=*/1, run);
}

}  // namespace

// The L3 that CPU 0 shares with its neighbours, as the kernel lists it ("32768K"); the C
// library's sysconf(_SC_LEVEL3_CACHE_SIZE) is not it: on AMD it sums every core complex's
// (256 MiB on a host whose threads share 32). kDefaultLastLevelCacheBytes where absent.
size_t LastLevelCacheBytes() {
  static const size_t bytes = [] {
    size_t size = 0;
    char unit = 0;
    if (FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
      if (std::fscanf(f, "%zu%c", &size, &unit) < 1) size = 0;
      std::fclose(f);
    }
    if (unit == 'K') size <<= 10;
    if (unit == 'M') size <<= 20;
    return size > 0 ? size : kDefaultLastLevelCacheBytes;
  }();
  return bytes;
}

bool WeightsComeFromMemory(const Graph& graph) {
  size_t bytes = 0;
  for (const Tensor* node : graph.nodes) {
    if (node->op != Op::kMulMat && node->op != Op::kMulMatId) continue;
    const Tensor* a = node->src[0];
    if (a->op == Op::kNone) bytes += WeightBytes(a);  // a weight, not a view of the KV cache.
  }
  return bytes > LastLevelCacheBytes();
}

void ComputeMulMat(const ComputeParams& p, Tensor* dst) {
  if (UseGemm(dst->src[0], dst->src[1])) return MulMatGemm(p, dst);
  if (UseQGemm(dst->src[0], dst->src[1])) return MulMatQGemm(p, dst);
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const DotKernels& kern = GetDotKernels(a->type);
  const ActView act = PrepareActivations(p, p.wdata, kern, a->type, b);

  const int64_t k = a->ne[0], m = a->ne[1], n = b->ne[1];
  const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
  const int64_t tile_rows = TileRows(p, kern, n, WeightBytes(a));
  const int64_t row_tiles = (m + tile_rows - 1) / tile_rows;
  const int64_t col_block = ColumnBlock(act.nb1, n);
  const int64_t col_blocks = (n + col_block - 1) / col_block;

  // With one tile of columns (decode), consecutive row tiles of the same matrix go to the
  // kernel as one run of rows: per-tile bookkeeping and dispatch cost as much as the dot
  // products of a short cached row (about 15% of a stories15M decode step). Not for long
  // rows streamed one at a time (the kernels would take them in interleaved groups).
  const bool merge_rows =
      n <= kMaxTileCols && (tile_rows > 1 || a->nb[1] <= kMergeMaxStreamingRowBytes);
  const int64_t chunk =
      std::max<int64_t>(1, static_cast<int64_t>(kShareChunkBytes / (tile_rows * a->nb[1])));
  const void* b_cols[kMaxTileCols];
  float* c_cols[kMaxTileCols];
  const auto run = [&](int64_t it0, int64_t it1, int64_t ahead_end) {
    for (int64_t it = it0, next; it < it1; it = next) {
      const int64_t rt = it % row_tiles, cb = (it / row_tiles) % col_blocks;
      const int64_t batch = it / (row_tiles * col_blocks);
      const int64_t i2 = batch % b->ne[2], i3 = batch / b->ne[2];
      const int64_t matrix_end = it - rt + row_tiles;  // past this matrix's last row tile.
      next = merge_rows ? std::min(it1, matrix_end) : it + 1;
      const int64_t row0 = rt * tile_rows, rows = std::min((next - it) * tile_rows, m - row0);
      const int64_t ahead_rows =
          std::min(std::max<int64_t>(0, std::min(ahead_end, matrix_end) - next) * tile_rows,
                   m - row0 - rows);
      const char* a_rows = At<const char>(a, 0, row0, i2 / r2, i3 / r3);
      const int64_t col_end = std::min(n, (cb + 1) * col_block);
      for (int64_t j0 = cb * col_block; j0 < col_end; j0 += kMaxTileCols) {
        const int64_t cols = std::min<int64_t>(kMaxTileCols, col_end - j0);
        for (int64_t j = 0; j < cols; ++j) {
          b_cols[j] = act.Row(j0 + j, i2, i3);
          c_cols[j] = At<float>(dst, row0, j0 + j, i2, i3);
        }
        RunTiles(kern, k, a_rows, a->nb[1], rows, ahead_rows, tile_rows, b_cols, c_cols, cols);
      }
    }
  };
  ForEachShare(p, b->ne[3] * b->ne[2] * col_blocks * row_tiles, chunk, run);
}

size_t MulMatWorkSize(const Tensor* dst, int nth) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  size_t size = ActWorkSize(a->type, b, nth);
  if (GemmSupports(a->type)) {
    size = std::max(size, GemmWorkSize(a->ne[1], b->ne[1], a->ne[0], nth));
  }
  if (QGemmSupports(a->type)) size = std::max(size, QGemmWorkSize(a, b, nth));
  return size;
}

// ---------------------------------------------------------------------------------------------
// MUL_MAT_ID: the (slot, token) pairs are grouped by expert (a counting sort done by thread 0
// while the others convert activations), then each expert's weight rows meet its columns.

namespace {

// Expert groups in scratch: offsets[e]..offsets[e+1] index `slots` (slot = i + t * n_used);
// bad[0] counts the slots with an invalid id, listed after it.
struct ExpertGroups {
  int64_t* offsets;
  int32_t* slots;
  int32_t* bad;
};

size_t GroupsBytes(int64_t n_experts, int64_t n_slots) {
  return RoundUp((n_experts + 1) * sizeof(int64_t), kAlign) +
         2 * RoundUp((n_slots + 1) * sizeof(int32_t), kAlign);
}

ExpertGroups GroupsAt(char* base, int64_t n_experts, int64_t n_slots) {
  ExpertGroups g;
  g.offsets = reinterpret_cast<int64_t*>(base);
  base += RoundUp((n_experts + 1) * sizeof(int64_t), kAlign);
  g.slots = reinterpret_cast<int32_t*>(base);
  base += RoundUp((n_slots + 1) * sizeof(int32_t), kAlign);
  g.bad = reinterpret_cast<int32_t*>(base);
  return g;
}

// The slot's expert among src0's, or -1: with an expert range (expert parallelism) ids
// outside it belong to another device; otherwise they are errors.
struct ExpertRange {
  int32_t first = 0;
  bool ranged = false;
};

void BuildGroups(const ComputeParams& p, const Tensor* ids, int64_t n_experts,
                 const ExpertRange& range, const ExpertGroups& g) {
  const int64_t n_used = ids->ne[0], n_tokens = ids->ne[1];
  auto local = [&](int64_t i, int64_t t) {
    const int64_t e = *At<const int32_t>(ids, i, t, 0, 0) - static_cast<int64_t>(range.first);
    return e >= 0 && e < n_experts ? e : -1;
  };
  std::fill(g.offsets, g.offsets + n_experts + 1, 0);
  g.bad[0] = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < n_used; ++i) {
      const int64_t e = local(i, t);
      if (e >= 0) {
        ++g.offsets[e + 1];
        continue;
      }
      if (g.bad[0] == 0 && !range.ranged) {
        char msg[128];
        std::snprintf(msg, sizeof(msg), "MUL_MAT_ID: expert id %d out of range [0, %lld)",
                      *At<const int32_t>(ids, i, t, 0, 0), static_cast<long long>(n_experts));
        p.Fail(msg);
      }
      g.bad[1 + g.bad[0]++] = static_cast<int32_t>(i + t * n_used);
    }
  }
  for (int64_t e = 0; e < n_experts; ++e) g.offsets[e + 1] += g.offsets[e];
  // Fill in token order (stable), using offsets[e] as the cursor, then restore it.
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < n_used; ++i) {
      const int64_t e = local(i, t);
      if (e >= 0) g.slots[g.offsets[e]++] = static_cast<int32_t>(i + t * n_used);
    }
  }
  for (int64_t e = n_experts; e > 0; --e) g.offsets[e] = g.offsets[e - 1];
  g.offsets[0] = 0;
}

}  // namespace

namespace {

// Calls fn(e, row_tile_begin, row_tile_end, col_begin, col_end) for this thread's share of a
// MUL_MAT_ID node's items (expert, column block, tile of rows): a contiguous range of the list
// of all of them, consecutive row tiles of one expert and column block in one call (decode
// streams an expert's rows one at a time: a call per row cost 14% of a qwen3moe decode).
template <class Fn>
void ForEachExpertItem(const ComputeParams& p, const ExpertGroups& g, int64_t n_experts,
                       int64_t row_tiles, int64_t col_block, Fn&& fn) {
  auto items_of = [&](int64_t e) {
    const int64_t cols = g.offsets[e + 1] - g.offsets[e];
    return row_tiles * ((cols + col_block - 1) / col_block);
  };
  int64_t total = 0;
  for (int64_t e = 0; e < n_experts; ++e) total += items_of(e);
  int64_t it0, it1;
  SplitRange(total, p.ith, p.nth, &it0, &it1);
  int64_t first = 0;  // first item of expert e.
  for (int64_t e = 0; e < n_experts && first < it1; first += items_of(e), ++e) {
    const int64_t cols = g.offsets[e + 1] - g.offsets[e];
    const int64_t last = std::min(it1, first + items_of(e));
    for (int64_t it = std::max(it0, first), next; it < last; it = next) {
      const int64_t rt = (it - first) % row_tiles, cb = (it - first) / row_tiles;
      next = std::min(last, it + (row_tiles - rt));
      fn(e, rt, rt + (next - it), cb * col_block, std::min(cols, (cb + 1) * col_block));
    }
  }
}

// The activation rows and output columns (from weight row row0) of expert e's columns
// [j0, j0 + n): its slots in token order.
void ExpertColumns(const ExpertGroups& g, const ActView& act, Tensor* dst, int64_t e, int64_t j0,
                   int64_t n, int64_t row0, const void** b_cols, float** c_cols) {
  const int64_t n_used = dst->ne[1], b_rows = dst->src[1]->ne[1];
  for (int64_t j = 0; j < n; ++j) {
    const int32_t slot = g.slots[g.offsets[e] + j0 + j];
    const int64_t i = slot % n_used, t = slot / n_used;
    b_cols[j] = act.Row(i % b_rows, t, 0);
    c_cols[j] = At<float>(dst, row0, i, t, 0);
  }
}

// The tiles of each expert's rows x its columns.
void RunExpertTiles(const ComputeParams& p, const DotKernels& kern, const ExpertGroups& g,
                    const ActView& act, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const int64_t k = a->ne[0], m = a->ne[1], n_experts = a->ne[2];
  const int64_t n_slots = dst->ne[1] * dst->ne[2];
  // Tokens per expert are few in decode, many in prefill: one tiling for the whole node.
  const int64_t tile_rows =
      TileRows(p, kern, n_slots / std::max<int64_t>(n_experts, 1), WeightBytes(a));
  const int64_t row_tiles = (m + tile_rows - 1) / tile_rows;
  const void* b_cols[kMaxTileCols];
  float* c_cols[kMaxTileCols];
  ForEachExpertItem(p, g, n_experts, row_tiles, ColumnBlock(act.nb1, n_slots),
                    [&](int64_t e, int64_t rt0, int64_t rt1, int64_t col_begin, int64_t col_end) {
                      const int64_t row0 = rt0 * tile_rows;
                      const int64_t rows = std::min(rt1 * tile_rows, m) - row0;
                      for (int64_t j0 = col_begin; j0 < col_end; j0 += kMaxTileCols) {
                        const int64_t nc = std::min<int64_t>(kMaxTileCols, col_end - j0);
                        ExpertColumns(g, act, dst, e, j0, nc, row0, b_cols, c_cols);
                        RunTiles(kern, k, At<const char>(a, 0, row0, e, 0), a->nb[1], rows,
                                 /*ahead_rows=*/0, tile_rows, b_cols, c_cols, nc);
                      }
                    });
}

// RunExpertTiles for the packed GEMM: tiles of kQGemmRows rows, each packed once per item into
// this thread's `pack`.
void RunExpertQGemm(const ComputeParams& p, const ExpertGroups& g, const ActView& act, void* pack,
                    Tensor* dst) {
  const Tensor* a = dst->src[0];
  const int64_t k = a->ne[0], m = a->ne[1];
  const int64_t n_slots = dst->ne[1] * dst->ne[2];
  const void* b_cols[kQGemmCols];
  float* c_cols[kQGemmCols];
  ForEachExpertItem(
      p, g, a->ne[2], (m + kQGemmRows - 1) / kQGemmRows, ColumnBlock(act.nb1, n_slots),
      [&](int64_t e, int64_t rt0, int64_t rt1, int64_t col_begin, int64_t col_end) {
        for (int64_t rt = rt0; rt < rt1; ++rt) {
          const int64_t row0 = rt * kQGemmRows;
          const int rows = static_cast<int>(std::min<int64_t>(kQGemmRows, m - row0));
          QGemmPack(a->type, k, At<const char>(a, 0, row0, e, 0), a->nb[1], rows, pack);
          for (int64_t j0 = col_begin; j0 < col_end; j0 += kQGemmCols) {
            const int nc = static_cast<int>(std::min<int64_t>(kQGemmCols, col_end - j0));
            ExpertColumns(g, act, dst, e, j0, nc, row0, b_cols, c_cols);
            QGemmTile(a->type, k, pack, rows, b_cols, nc, c_cols);
          }
        }
      });
}

// Slots with an invalid expert id read as zeros (the node has failed anyway), as do those
// of experts outside the node's expert range.
void ZeroInvalidSlots(const ComputeParams& p, const ExpertGroups& g, Tensor* dst) {
  const int64_t n_used = dst->ne[1];
  int64_t s0, s1;
  SplitRange(g.bad[0], p.ith, p.nth, &s0, &s1);
  for (int64_t s = s0; s < s1; ++s) {
    const int32_t slot = g.bad[1 + s];
    for (int64_t r = 0; r < dst->ne[0]; ++r) {
      *At<float>(dst, r, slot % n_used, slot / n_used, 0) = 0.0f;
    }
  }
}

}  // namespace

void ComputeMulMatId(const ComputeParams& p, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const Tensor* ids = dst->src[2];
  const int64_t n_experts = a->ne[2], n_slots = ids->ne[0] * ids->ne[1];
  const DotKernels& kern = GetDotKernels(a->type);

  // Groups go first in scratch so thread 0 can build them before the activation Sync.
  char* base = AlignUp(p.wdata);
  const ExpertGroups g = GroupsAt(base, n_experts, n_slots);
  ExpertRange range;
  range.first = dst->op_params[kMulMatIdFirstExpert];
  range.ranged = dst->op_params[kMulMatIdExpertCount] > 0;
  if (p.ith == 0) BuildGroups(p, ids, n_experts, range, g);
  // Prefill: as many tokens per expert as MUL_MAT takes the packed GEMM for.
  if (QGemmTakes(a, n_slots / std::max<int64_t>(n_experts, 1))) {
    // PrepareQGemm syncs: the groups are complete after it.
    const auto [act, pack] = PrepareQGemm(p, base + GroupsBytes(n_experts, n_slots), a, b);
    RunExpertQGemm(p, g, act, pack, dst);
    ZeroInvalidSlots(p, g, dst);
    return;
  }
  const ActView act =
      PrepareActivations(p, base + GroupsBytes(n_experts, n_slots), kern, a->type, b);
  if (!NeedsConversion(kern, b)) p.Sync();  // the groups must be complete either way.
  RunExpertTiles(p, kern, g, act, dst);
  ZeroInvalidSlots(p, g, dst);
}

size_t MulMatIdWorkSize(const Tensor* dst, int nth) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const Tensor* ids = dst->src[2];
  size_t act = ActWorkSize(a->type, b, nth);
  if (QGemmSupports(a->type)) act = std::max(act, QGemmWorkSize(a, b, nth));
  return kAlign + GroupsBytes(a->ne[2], ids->ne[0] * ids->ne[1]) + act;
}

}  // namespace tg::cpu
