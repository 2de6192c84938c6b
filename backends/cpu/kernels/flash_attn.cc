// FLASH_ATTN: fused softmax(scale * q k^T + mask) v with an online softmax (running max and
// sum, updated per block of kBlockKv keys), F32 or F16 K/V, GQA head broadcast.
//
// The query rows that share a KV head (the group's heads x the positions) are cut into tiles.
// A tile walks only the key blocks its mask rows can see: a row whose mask is one run of
// zeros among -inf (causal, padding) is summarized once per node as that run, so the masked
// half of a causal prefill costs nothing and visible blocks need no mask reads; other rows are
// read block by block as bit sets. A key no row of the tile sees never enters the sums
// (stale cache slots behind the mask, even NaN, cannot leak in). Two kernels:
//  - LaneKernel (SIMD builds, tiles of >= kLanes / 2 rows, i.e. prefill): the tile's rows sit
//    in vector lanes. q^T, the running max and sum and the output are vectors over rows, so
//    scores, softmax and the V update are vertical FMAs with K/V elements broadcast: no
//    horizontal sums, and no lanes idle on small heads (D = 8 is 8 FMAs per key for all
//    16 rows). F16 K/V are converted to f32 once per thread and KV head when they fit in
//    kHeadStageBytes (else once per tile and block), shared by all rows.
//  - RowKernel (decode, short tiles, scalar builds): row-major dot products and V updates on
//    K/V read in place, F16 converted as loaded; the rows of a GQA group share each K/V load
//    and 4 keys share a horizontal sum.
// Work items are tiles x key chunks, dealt round-robin to the threads. Keys are split into
// several chunks only when there are fewer tiles than threads can share evenly (decode): each
// chunk leaves a partial (max, sum, acc) per row, merged after a Sync.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_convert.h"
#include "backends/cpu/kernels/simd_math.h"
#include "core/fp16.h"

// 8-wide helpers (f32 FMAs, F16 loads): every AVX2 and AVX-512 target we build for has them.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define TG_FA_YMM 1
#include <immintrin.h>
#endif

namespace tg::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Lane-wise max(m, kLowest) as the softmax offset keeps exp(s - m) defined for rows that have
// seen no key yet (m = -inf): exp(-inf - kLowest) = 0 where exp(-inf + inf) would be NaN.
constexpr float kLowest = std::numeric_limits<float>::lowest();
constexpr int64_t kMaxTileRows = 16;    // query rows per tile: a 16-lane vector at most.
constexpr int64_t kBlockKv = 32;        // keys per softmax update: one visibility bit each.
constexpr int64_t kAlignFloats = 16;    // 64 bytes: scratch rows start on cache lines.
constexpr int64_t kMinSplitKeys = 128;  // a key chunk must outweigh merging its partial state.
constexpr int64_t kItemsPerThread = 4;  // items per thread at which uneven loads even out.
constexpr int kKeyGroup = 4;            // keys that share the q loads of their dot products.
constexpr int kLaneKeyGroup = 8;        // the same in LaneKernel: 8 FMA chains hide latency.
constexpr int kSmallHead = 8;           // head size with its own unrolled LaneKernel scores.
// Query rows (of one KV head) sharing each K/V load in the row kernel: their accumulators
// must fit the vector registers (32 with AVX-512, 16 with AVX2).
#if defined(TG_SIMD_AVX512)
constexpr int kRowGroup = 4;
#else
constexpr int kRowGroup = 2;
#endif
// A thread's f32 copy of one KV head's K and V (LaneKernel): about an L2 cache.
constexpr int64_t kHeadStageBytes = int64_t{1} << 20;

#if defined(TG_FA_YMM)
constexpr bool kF16Direct = true;  // F16 K/V can be read in place by the row kernel.
#else
constexpr bool kF16Direct = false;
#endif

#if defined(TG_SIMD)
constexpr int64_t kVectorFloats = simd::kLanes;
#else
constexpr int64_t kVectorFloats = 1;
#endif
static_assert(kBlockKv % kVectorFloats == 0);

#if defined(TG_SIMD)
using simd::kLanes;
using simd::Load;
using simd::Set1;
using simd::Store;
using simd::VecF;
// Heads up to this size use rows in lanes from half-full tiles on: their row-kernel costs are
// mostly per key, not per element. Larger heads need three quarters (measured crossovers).
constexpr int64_t kSmallLaneHead = 16;
#if defined(TG_SIMD_AVX512)
constexpr int kColumnGroup = 16;  // output columns kept in registers by the V update.
#else
constexpr int kColumnGroup = 8;
#endif
#endif

int64_t AlignFloats(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
uint32_t LowBits(int64_t n) { return n >= 32 ? ~0u : (1u << n) - 1u; }

inline float ToF32(float x) { return x; }
inline float ToF32(uint16_t h) { return HalfToFloat(h); }

#if defined(TG_FA_YMM)
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// The four sums of a[0..3] as one vector.
inline __m128 HorizontalSum4(const __m256* a) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#endif
#if defined(TG_SIMD_AVX512)
inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#if defined(TG_FA_YMM)
// The 16 partial sums folded to 8.
inline __m256 Fold(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
#endif
#endif

// y[0, n) = f32(x[0, n)) for dense halves, inline: rows are short and many.
void HalfsToFloats(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(TG_SIMD_AVX512)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Load16(x + i));
#endif
#if defined(TG_FA_YMM)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Load8(x + i));
#endif
  for (; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

// Bit i (i < n <= 32) of *visible: x[i] is not -inf; of *nonzero: visible and not 0.
void VisibleBits(const float* x, int64_t n, uint32_t* visible, uint32_t* nonzero) {
  uint32_t vis = 0, nz = 0;
  int64_t i = 0;
#if defined(TG_SIMD_AVX512)
  const __m512 neg_inf = _mm512_set1_ps(kNegInf), zero = _mm512_setzero_ps();
  for (; i < n; i += 16) {  // masked loads: never past the row's end.
    const __mmask16 live = static_cast<__mmask16>(LowBits(std::min<int64_t>(16, n - i)));
    const __m512 v = _mm512_maskz_loadu_ps(live, x + i);
    const __mmask16 seen = _mm512_mask_cmp_ps_mask(live, v, neg_inf, _CMP_NEQ_UQ);
    vis |= static_cast<uint32_t>(seen) << i;
    nz |= static_cast<uint32_t>(_mm512_mask_cmp_ps_mask(seen, v, zero, _CMP_NEQ_UQ)) << i;
  }
#elif defined(TG_FA_YMM)
  const __m256 neg_inf = _mm256_set1_ps(kNegInf), zero = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const uint32_t seen = _mm256_movemask_ps(_mm256_cmp_ps(v, neg_inf, _CMP_NEQ_UQ));
    vis |= seen << i;
    nz |= (seen & _mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_NEQ_UQ))) << i;
  }
#endif
  for (; i < n; ++i) {
    if (x[i] == kNegInf) continue;
    vis |= 1u << i;
    if (x[i] != 0.0f) nz |= 1u << i;
  }
  *visible = vis;
  *nonzero = nz;
}

// ---------------------------------------------------------------------------------------
// Problem description, work plan and scratch.

// Rows in lanes pay off once enough lanes of the tiles hold a query row (of rows per KV head).
bool UseLanes(int64_t rows, int64_t d) {
#if defined(TG_SIMD)
  const int64_t lanes = CeilDiv(rows, kLanes) * kLanes;
  return rows > 0 && (d <= kSmallLaneHead ? 2 * rows >= lanes : 4 * rows >= 3 * lanes);
#else
  return false;
#endif
}

struct Dims {
  int64_t d, dv, n_q, n_kv, n_head_kv, n_batch, group;  // group: query heads per KV head.
  int64_t d_pad, dv_pad;
  bool lanes;  // LaneKernel, else RowKernel.

  explicit Dims(const Tensor& dst) {
    const Tensor& q = *dst.src[0];
    const Tensor& k = *dst.src[1];
    d = q.ne[0];
    n_q = q.ne[1];
    n_batch = q.ne[3];
    dv = dst.src[2]->ne[0];
    n_kv = k.ne[1];
    n_head_kv = k.ne[2];
    group = q.ne[2] / n_head_kv;
    d_pad = AlignFloats(d);
    dv_pad = AlignFloats(dv);
    lanes = UseLanes(RowsPerHead(), d);
  }
  int64_t RowsPerHead() const { return n_q * group; }
  int64_t KvBlocks() const { return CeilDiv(n_kv, kBlockKv); }
};

// Query rows of one KV head and batch: row rho is position rho / group of head
// hk * group + rho % group, so rows of a position are adjacent and share a mask row.
struct Tile {
  int64_t b, hk, first, rows;
  int64_t Pos(int64_t r, const Dims& dims) const { return (first + r) / dims.group; }
  int64_t Head(int64_t r, const Dims& dims) const {
    return hk * dims.group + (first + r) % dims.group;
  }
};

// The split of the work into items: a tile of query rows x a chunk of keys. Depends only on
// the shapes and the thread count, so every thread (and FlashAttnWorkSize) agrees on it.
struct Plan {
  int64_t tile_rows = 1, tiles_per_head = 1, n_tiles = 0;
  int64_t n_split = 1, chunk = kBlockKv;  // key chunks per tile, keys per chunk.

  Plan(const Dims& dims, int nth) {
    const int64_t rows = std::max<int64_t>(dims.RowsPerHead(), 1);
    int64_t max_rows = kMaxTileRows;
#if defined(TG_SIMD)
    if (dims.lanes) max_rows = kLanes;
#endif
    tiles_per_head = CeilDiv(rows, max_rows);
    tile_rows = CeilDiv(rows, tiles_per_head);  // even tiles, no nearly empty last one.
    n_tiles = tiles_per_head * dims.n_head_kv * dims.n_batch;
    const int64_t max_split = std::max<int64_t>(1, dims.n_kv / kMinSplitKeys);
    // Split keys until the items share out evenly or are plenty.
    while (nth > 1 && n_split < max_split && (n_tiles * n_split) % nth != 0 &&
           n_tiles * n_split < kItemsPerThread * nth) {
      ++n_split;
    }
    chunk = CeilDiv(CeilDiv(std::max<int64_t>(dims.n_kv, 1), n_split), kBlockKv) * kBlockKv;
    n_split = std::max<int64_t>(1, CeilDiv(dims.n_kv, chunk));
  }
  int64_t Items() const { return n_tiles * n_split; }
  // Partial results of all items, when keys are split: per row m, l and Dv accumulators.
  int64_t PartialFloats(const Dims& dims) const {
    return n_split > 1 ? Items() * tile_rows * (dims.dv + 2) : 0;
  }
  // Tiles are numbered head-major: a thread taking every nth item stays on one KV head (and
  // its staged K/V) for a while, and still gets early (cheap under a causal mask) and late
  // tiles alike.
  Tile TileAt(int64_t i, const Dims& dims) const {
    const int64_t hb = i / tiles_per_head;
    const int64_t first = i % tiles_per_head * tile_rows;
    return Tile{hb / dims.n_head_kv, hb % dims.n_head_kv, first,
                std::min(tile_rows, dims.RowsPerHead() - first)};
  }
};

// A mask row whose visible keys are one run of zeros [lo, hi) with -inf elsewhere (causal and
// padding masks): blocks then need no mask reads. kGeneral rows are read block by block.
struct RowRun {
  enum State : int32_t { kUnknown, kRun, kGeneral };
  int64_t lo, hi;
  State state;
};

// One thread's scratch, carved from the node's work buffer.
struct Scratch {
  float* q;       // q rows (RowKernel) or q^T, d x kLanes (LaneKernel); scaled.
  float* acc;     // output rows, unnormalized.
  float* ot;      // output^T, dv x kLanes (LaneKernel).
  float* s;       // scores, then weights: per row (RowKernel) or kBlockKv x kLanes.
  float* mask;    // f32 copies of the tile's mask rows for one block, plus one spare row.
  float* mt;      // mask values transposed, kBlockKv x kLanes (LaneKernel).
  float* k_rows;  // a block of K rows as f32, where they cannot be read in place.
  float* v_rows;
  float* k_head;  // a whole KV head's K rows as f32 (LaneKernel), or nullptr.
  float* v_head;
  uint8_t* k_staged;  // per key block of k_head / v_head: converted yet.
  uint8_t* v_staged;
  RowRun* runs;  // per query position: its mask row as a run, once known.

  // Carves the scratch from base (nullptr: only counts); returns the bytes used.
  size_t Carve(const Dims& dims, const Tensor& dst, uint8_t* base) {
    size_t used = 0;
    auto take = [&](size_t bytes) {
      uint8_t* p = base == nullptr ? nullptr : base + used;
      used += (bytes + kAlignFloats * sizeof(float) - 1) / (kAlignFloats * sizeof(float)) *
              (kAlignFloats * sizeof(float));
      return p;
    };
    auto floats = [&](int64_t n) { return reinterpret_cast<float*>(take(n * sizeof(float))); };
    q = floats(kMaxTileRows * dims.d_pad);
    acc = floats(kMaxTileRows * dims.dv_pad);
    ot = floats(kMaxTileRows * dims.dv_pad);
    s = floats(kMaxTileRows * kBlockKv);
    mask = floats((kMaxTileRows + 1) * kBlockKv);
    mt = floats(kMaxTileRows * kBlockKv);
    k_rows = floats(kBlockKv * dims.d_pad);
    v_rows = floats(kBlockKv * dims.dv_pad);
    const int64_t stage_rows = dims.KvBlocks() * kBlockKv;
    const bool stage_k = dims.lanes && !InPlaceF32(*dst.src[1]);
    const bool stage_v = dims.lanes && !InPlaceF32(*dst.src[2]);
    const int64_t stage_bytes =
        stage_rows * (stage_k * dims.d_pad + stage_v * dims.dv_pad) * sizeof(float);
    const bool stage = stage_bytes > 0 && stage_bytes <= kHeadStageBytes;
    k_head = stage && stage_k ? floats(stage_rows * dims.d_pad) : nullptr;
    v_head = stage && stage_v ? floats(stage_rows * dims.dv_pad) : nullptr;
    k_staged = take(dims.KvBlocks());
    v_staged = take(dims.KvBlocks());
    runs = reinterpret_cast<RowRun*>(take(dims.n_q * sizeof(RowRun)));
    return used;
  }

  // K/V rows the lane kernel reads in place: dense f32 with a whole-float row stride.
  static bool InPlaceF32(const Tensor& t) {
    return t.type == DType::kF32 && t.nb[0] == sizeof(float) && t.nb[1] % sizeof(float) == 0;
  }
};

// K or V rows of a tile's KV head: as f32 (in place when dense f32, else converted into
// staging) or, when dense F16, as raw halves for the row kernel's converting loads.
class KvSource {
 public:
  explicit KvSource(const Tensor& t)
      : t_(t),
        base_(static_cast<const uint8_t*>(t.data)),
        dense_f32_(t.type == DType::kF32 && t.nb[0] == sizeof(float)),
        dense_f16_(t.type == DType::kF16 && t.nb[0] == sizeof(uint16_t)) {}

  bool DenseF16() const { return dense_f16_; }
  int64_t RowStride() const { return static_cast<int64_t>(t_.nb[1]); }

  template <typename T>
  const T* Row(int64_t j, const Tile& tile, float* staging) const {
    const uint8_t* row = base_ + j * t_.nb[1] + tile.hk * t_.nb[2] + tile.b * t_.nb[3];
    if constexpr (std::is_same_v<T, uint16_t>) {
      return reinterpret_cast<const uint16_t*>(row);
    } else {
      if (dense_f32_) return reinterpret_cast<const float*>(row);
      if (dense_f16_) {
        HalfsToFloats(reinterpret_cast<const uint16_t*>(row), staging, t_.ne[0]);
      } else {
        ConvertRow(t_.type, row, t_.nb[0], DType::kF32, staging, sizeof(float), t_.ne[0]);
      }
      return staging;
    }
  }

  // Row j as dense f32 at out.
  void CopyF32(int64_t j, const Tile& tile, float* out) const {
    const float* row = Row<float>(j, tile, out);
    if (row != out) std::memcpy(out, row, t_.ne[0] * sizeof(float));
  }

 private:
  const Tensor& t_;
  const uint8_t* base_;
  bool dense_f32_, dense_f16_;
};

// What the mask says about one block of keys for the rows of a tile.
struct BlockMask {
  uint32_t vis[kMaxTileRows];         // bit jj: row r sees key j0 + jj (0 past the tile).
  const float* values[kMaxTileRows];  // row r's mask values for the block (when additive).
  uint32_t any;                       // keys some row sees.
  bool same;                          // every row sees exactly `any`.
  bool additive;                      // some visible value is not 0: values must be added.
};

// Bits of keys [j0, j0 + n) inside the run.
uint32_t RunBits(const RowRun& run, int64_t j0, int64_t n) {
  const int64_t from = std::clamp<int64_t>(run.lo - j0, 0, n);
  const int64_t to = std::clamp<int64_t>(run.hi - j0, 0, n);
  return LowBits(to) & ~LowBits(from);
}

// A tile's mask rows, resolved once per tile.
struct TileMask {
  int64_t rows;
  int64_t pos[kMaxTileRows];        // row r reads mask row pos[r]...
  const RowRun* run[kMaxTileRows];  // ... classified as this (nullptr: no mask).
  bool all_runs;                    // every row is a run: blocks need no mask reads.
};

// Reads the mask for tiles; caches each row's run in this thread's scratch.
class MaskReader {
 public:
  MaskReader(const Tensor* mask, const Dims& dims, const Scratch& s)
      : mask_(mask), dims_(dims), staging_(s.mask), runs_(s.runs) {}

  // Forgets the cached runs (the scratch holds an earlier node's).
  void Reset() const {
    if (mask_ == nullptr) return;
    for (int64_t p = 0; p < dims_.n_q; ++p) runs_[p].state = RowRun::kUnknown;
  }

  void Prepare(const Tile& t, TileMask* tm) const {
    tm->rows = t.rows;
    tm->all_runs = true;
    for (int64_t r = 0; r < t.rows; ++r) {
      tm->pos[r] = t.Pos(r, dims_);
      tm->run[r] = mask_ != nullptr ? &Run(tm->pos[r]) : nullptr;
      tm->all_runs &= mask_ == nullptr || tm->run[r]->state == RowRun::kRun;
    }
  }

  // The blocks of [k0, k1) (k0 a multiple of kBlockKv) worth visiting for the tile:
  // [*begin, *end), begin on a block boundary. Only rows that are runs narrow it.
  void KeyRange(const TileMask& tm, int64_t k0, int64_t k1, int64_t* begin, int64_t* end) const {
    *begin = k0;
    *end = k1;
    if (mask_ == nullptr || !tm.all_runs) return;
    int64_t lo = k1, hi = k0;
    for (int64_t r = 0; r < tm.rows; ++r) {
      if (tm.run[r]->lo >= tm.run[r]->hi) continue;
      lo = std::min(lo, tm.run[r]->lo);
      hi = std::max(hi, tm.run[r]->hi);
    }
    lo = std::max(lo, k0);
    *begin = k0 + (lo - k0) / kBlockKv * kBlockKv;
    *end = std::max(*begin, std::min(k1, hi));
  }

  // Fills *bm for keys [j0, j0 + n) (n <= kBlockKv); false when no row sees any of them.
  bool Read(const TileMask& tm, int64_t j0, int64_t n, BlockMask* bm) const {
    std::fill(bm->vis + tm.rows, bm->vis + kMaxTileRows, 0u);
    bm->any = 0;
    bm->same = true;
    bm->additive = false;
    for (int64_t r = 0; r < tm.rows; ++r) {
      if (r > 0 && tm.pos[r] == tm.pos[r - 1]) {  // same mask row.
        bm->vis[r] = bm->vis[r - 1];
        bm->values[r] = bm->values[r - 1];
      } else {
        ReadRow(tm, r, j0, n, bm);
      }
      bm->any |= bm->vis[r];
    }
    for (int64_t r = 0; r < tm.rows; ++r) bm->same &= bm->vis[r] == bm->any;
    return bm->any != 0;
  }

 private:
  void ReadRow(const TileMask& tm, int64_t r, int64_t j0, int64_t n, BlockMask* bm) const {
    bm->values[r] = nullptr;
    if (mask_ == nullptr) {
      bm->vis[r] = LowBits(n);
      return;
    }
    if (tm.run[r]->state == RowRun::kRun) {
      bm->vis[r] = RunBits(*tm.run[r], j0, n);
      return;
    }
    uint32_t nonzero;
    bm->values[r] = Values(tm.pos[r], j0, n, staging_ + r * kBlockKv);
    VisibleBits(bm->values[r], n, &bm->vis[r], &nonzero);
    bm->additive |= nonzero != 0;
  }

  // Row pos's run, classified on first use from the whole mask row.
  const RowRun& Run(int64_t pos) const {
    RowRun& run = runs_[pos];
    if (run.state != RowRun::kUnknown) return run;
    run = RowRun{0, 0, RowRun::kRun};
    float* staging = staging_ + kMaxTileRows * kBlockKv;  // the spare row.
    for (int64_t j0 = 0; j0 < dims_.n_kv; j0 += kBlockKv) {
      const int64_t n = std::min(kBlockKv, dims_.n_kv - j0);
      uint32_t vis, nonzero;
      VisibleBits(Values(pos, j0, n, staging), n, &vis, &nonzero);
      if (vis == 0) continue;
      const int first = std::countr_zero(vis), count = std::popcount(vis);
      const bool started = run.hi > run.lo;
      if (nonzero != 0 || vis != LowBits(count) << first || (started && run.hi != j0 + first)) {
        run.state = RowRun::kGeneral;
        break;
      }
      if (!started) run.lo = j0 + first;
      run.hi = j0 + first + count;
    }
    return run;
  }

  const float* Values(int64_t pos, int64_t j0, int64_t n, float* staging) const {
    const uint8_t* row =
        static_cast<const uint8_t*>(mask_->data) + pos * mask_->nb[1] + j0 * mask_->nb[0];
    if (mask_->type == DType::kF32 && mask_->nb[0] == sizeof(float)) {
      return reinterpret_cast<const float*>(row);
    }
    if (mask_->type == DType::kF16 && mask_->nb[0] == sizeof(uint16_t)) {
      HalfsToFloats(reinterpret_cast<const uint16_t*>(row), staging, n);
    } else {
      ConvertRow(mask_->type, row, mask_->nb[0], DType::kF32, staging, sizeof(float), n);
    }
    return staging;
  }

  const Tensor* mask_;
  const Dims& dims_;
  float* staging_;
  RowRun* runs_;
};

// The keys of a block that some row of the tile sees.
struct KeyList {
  int64_t na = 0;
  int idx[kBlockKv];  // offsets from the block's first key.

  void List(uint32_t bits) {
    for (na = 0; bits != 0; bits &= bits - 1) idx[na++] = std::countr_zero(bits);
  }
};

// ... and their K and V rows, for the row kernel.
template <typename TK, typename TV>
struct KeyBlock : KeyList {
  const TK* k[kBlockKv];
  const TV* v[kBlockKv];
};

// A finished tile (or tile x key chunk): per row the running max (-inf: no key seen), the sum
// of exp(score - max) and the unnormalized output at acc + r * stride.
struct TileResult {
  float m[kMaxTileRows];
  float l[kMaxTileRows];
  const float* acc;
  int64_t stride;
};

// Everything a kernel reads; one per thread.
struct Problem {
  const Tensor& dst;
  const Tensor& q;
  KvSource k, v;
  Dims dims;
  Scratch s;
  MaskReader mask;
  float scale;

  Problem(const Tensor& t, const Dims& d, uint8_t* scratch)
      : dst(t),
        q(*t.src[0]),
        k(*t.src[1]),
        v(*t.src[2]),
        dims(d),
        s(CarveScratch(dims, t, scratch)),
        mask(t.src[3], dims, s),
        scale(t.ParamF32(0)) {}

  static Scratch CarveScratch(const Dims& dims, const Tensor& t, uint8_t* base) {
    Scratch s;
    s.Carve(dims, t, base);
    return s;
  }

  // Query row r of the tile, times the scale (folded in once instead of once per score).
  // With an F16 cache, q is rounded to F16 first: the scores are then exactly F16 x F16 dot
  // products, as in llama.cpp, whose F16 path we are checked against; an F32 cache keeps q
  // exact.
  void LoadQRow(const Tile& t, int64_t r, float* out, int64_t out_stride) const {
    const uint8_t* row = static_cast<const uint8_t*>(q.data) + t.Pos(r, dims) * q.nb[1] +
                         t.Head(r, dims) * q.nb[2] + t.b * q.nb[3];
    const bool round_to_f16 = dst.src[1]->type == DType::kF16;
    for (int64_t c = 0; c < dims.d; ++c) {
      float x;
      std::memcpy(&x, row + c * q.nb[0], sizeof(x));
      if (round_to_f16) x = HalfToFloat(FloatToHalf(x));
      out[c * out_stride] = x * scale;
    }
  }
};

size_t ScratchBytes(const Dims& dims, const Tensor& dst) {
  Scratch s;
  return s.Carve(dims, dst, nullptr);
}

// ---------------------------------------------------------------------------------------
// RowKernel: row-major, K/V read in place.

// s[r * s_stride + t] = q_r . k[t] for NR query rows (q_r = q + r * q_stride) and NK keys.
// A chunk of a key is loaded (and converted) once for all rows; a row's NK sums share one
// horizontal reduction when NK = 4.
template <int NR, int NK, typename T>
void Dots(const float* q, int64_t q_stride, const T* const* k, int64_t n, float* s,
          int64_t s_stride) {
  int64_t i = 0;
  for (int r = 0; r < NR; ++r) std::fill(s + r * s_stride, s + r * s_stride + NK, 0.0f);
#if defined(TG_FA_YMM)
  __m256 a[NR][NK];
  for (int r = 0; r < NR; ++r) {
    for (int t = 0; t < NK; ++t) a[r][t] = _mm256_setzero_ps();
  }
#if defined(TG_SIMD_AVX512)
  if (n >= 16) {
    __m512 z[NR][NK];
    for (int r = 0; r < NR; ++r) {
      for (int t = 0; t < NK; ++t) z[r][t] = _mm512_setzero_ps();
    }
    for (; i + 16 <= n; i += 16) {
      __m512 kv[NK];
      for (int t = 0; t < NK; ++t) kv[t] = Load16(k[t] + i);
      for (int r = 0; r < NR; ++r) {
        const __m512 qv = Load16(q + r * q_stride + i);
        for (int t = 0; t < NK; ++t) z[r][t] = _mm512_fmadd_ps(qv, kv[t], z[r][t]);
      }
    }
    for (int r = 0; r < NR; ++r) {
      for (int t = 0; t < NK; ++t) a[r][t] = Fold(z[r][t]);
    }
  }
#endif
  for (; i + 8 <= n; i += 8) {
    __m256 kv[NK];
    for (int t = 0; t < NK; ++t) kv[t] = Load8(k[t] + i);
    for (int r = 0; r < NR; ++r) {
      const __m256 qv = Load8(q + r * q_stride + i);
      for (int t = 0; t < NK; ++t) a[r][t] = _mm256_fmadd_ps(qv, kv[t], a[r][t]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    if constexpr (NK == 4) {
      _mm_storeu_ps(s + r * s_stride, HorizontalSum4(a[r]));
    } else {
      for (int t = 0; t < NK; ++t) s[r * s_stride + t] = HorizontalSum(a[r][t]);
    }
  }
#endif
  for (; i < n; ++i) {
    for (int t = 0; t < NK; ++t) {
      const float kt = ToF32(k[t][i]);
      for (int r = 0; r < NR; ++r) s[r * s_stride + t] += q[r * q_stride + i] * kt;
    }
  }
}

// Vector types for the row kernel's column loops.
#if defined(TG_SIMD_AVX512)
struct Zmm {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  template <typename T>
  static V Load(const T* p) {
    return Load16(p);
  }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
#endif
#if defined(TG_FA_YMM)
struct Ymm {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  template <typename T>
  static V Load(const T* p) {
    return Load8(p);
  }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
#endif

#if defined(TG_SIMD_AVX512) || defined(TG_FA_YMM)
// FMA chains a column loop keeps in flight: fewer wait on FMA latency.
constexpr int kMinChains = 8;
constexpr int kMaxStreams = 4;

// acc_r[c0, c0 + N * width) += sum_a w_r[a] * v[a][...] for NR rows (acc_r = acc + r *
// acc_stride, w_r = w + r * w_stride) over na keys. A chunk of a V row is loaded (and
// converted) once for all rows; with few rows x columns, U streams of keys accumulate apart
// so that enough independent FMA chains are in flight.
template <typename Vec, int NR, int N, typename T>
void WeightedColumns(float* acc, int64_t acc_stride, const float* w, int64_t w_stride,
                     const T* const* v, int64_t na, int64_t c0) {
  using V = typename Vec::V;
  constexpr int U = std::clamp(kMinChains / (NR * N), 1, kMaxStreams);
  V s[U][NR][N];
  for (int u = 0; u < U; ++u) {
    for (int r = 0; r < NR; ++r) {
      for (int i = 0; i < N; ++i) {
        s[u][r][i] = u == 0 ? Vec::Load(acc + r * acc_stride + c0 + i * Vec::kWidth) : Vec::Zero();
      }
    }
  }
  auto add_key = [&](int u, int64_t a) {
    V vv[N];
    for (int i = 0; i < N; ++i) vv[i] = Vec::Load(v[a] + c0 + i * Vec::kWidth);
    for (int r = 0; r < NR; ++r) {
      const V wa = Vec::Set1(w[r * w_stride + a]);
      for (int i = 0; i < N; ++i) s[u][r][i] = Vec::Fmadd(wa, vv[i], s[u][r][i]);
    }
  };
  int64_t a = 0;
  for (; a + U <= na; a += U) {
    for (int u = 0; u < U; ++u) add_key(u, a + u);
  }
  for (; a < na; ++a) add_key(0, a);
  for (int r = 0; r < NR; ++r) {
    for (int i = 0; i < N; ++i) {
      for (int u = 1; u < U; ++u) s[0][r][i] = Vec::Add(s[0][r][i], s[u][r][i]);
      Vec::Store(acc + r * acc_stride + c0 + i * Vec::kWidth, s[0][r][i]);
    }
  }
}
#endif

// acc_r[0, n) += sum_a w_r[a] * v[a][0, n) for NR rows (see WeightedColumns); at most 16
// accumulators at a time, F16 rows converted as they are loaded.
template <int NR, typename T>
void WeightedSum(float* acc, int64_t acc_stride, const float* w, int64_t w_stride,
                 const T* const* v, int64_t na, int64_t n) {
  int64_t c = 0;
#if defined(TG_SIMD_AVX512)
  if constexpr (NR <= 2) {
    for (; c + 128 <= n; c += 128)
      WeightedColumns<Zmm, NR, 8>(acc, acc_stride, w, w_stride, v, na, c);
  }
  for (; c + 64 <= n; c += 64) WeightedColumns<Zmm, NR, 4>(acc, acc_stride, w, w_stride, v, na, c);
  for (; c + 32 <= n; c += 32) WeightedColumns<Zmm, NR, 2>(acc, acc_stride, w, w_stride, v, na, c);
  for (; c + 16 <= n; c += 16) WeightedColumns<Zmm, NR, 1>(acc, acc_stride, w, w_stride, v, na, c);
#endif
#if defined(TG_FA_YMM)
  if constexpr (NR <= 2) {
    for (; c + 32 <= n; c += 32)
      WeightedColumns<Ymm, NR, 4>(acc, acc_stride, w, w_stride, v, na, c);
  }
  for (; c + 8 <= n; c += 8) WeightedColumns<Ymm, NR, 1>(acc, acc_stride, w, w_stride, v, na, c);
#endif
  for (; c < n; ++c) {
    for (int r = 0; r < NR; ++r) {
      float s0 = acc[r * acc_stride + c];
      for (int64_t a = 0; a < na; ++a) s0 += w[r * w_stride + a] * ToF32(v[a][c]);
      acc[r * acc_stride + c] = s0;
    }
  }
}

float MaxOf(const float* x, int64_t n) {
  int64_t i = 0;
  float m = kNegInf;
#if defined(TG_SIMD)
  if (n >= kLanes) {
    VecF v = Load(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) v = simd::Max(v, Load(x + i));
    m = simd::ReduceMax(v);
  }
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

template <typename TK, typename TV>
class RowKernel {
 public:
  explicit RowKernel(const Problem& pr) : pr_(pr), dims_(pr.dims), s_(pr.s) {}

  // Attends the tile's rows to keys [k0, k1).
  void Run(const Tile& t, int64_t k0, int64_t k1, TileResult* res) {
    for (int64_t r = 0; r < t.rows; ++r) {
      pr_.LoadQRow(t, r, Q(r), 1);
      std::fill(Acc(r), Acc(r) + dims_.dv, 0.0f);
      res->m[r] = kNegInf;
      res->l[r] = 0.0f;
    }
    res->acc = s_.acc;
    res->stride = dims_.dv_pad;
    KeyBlock<TK, TV> kb;
    BlockMask bm;
    TileMask tm;
    pr_.mask.Prepare(t, &tm);
    int64_t begin, end;
    pr_.mask.KeyRange(tm, k0, k1, &begin, &end);
    for (int64_t j0 = begin; j0 < end; j0 += kBlockKv) {
      if (!pr_.mask.Read(tm, j0, std::min(kBlockKv, k1 - j0), &bm)) continue;
      kb.List(bm.any);
      for (int64_t a = 0; a < kb.na; ++a) {
        kb.k[a] = pr_.k.template Row<TK>(j0 + kb.idx[a], t, s_.k_rows + a * dims_.d_pad);
        kb.v[a] = pr_.v.template Row<TV>(j0 + kb.idx[a], t, s_.v_rows + a * dims_.dv_pad);
      }
      // Rows in groups share each K and V load; softmax bookkeeping is per row.
      ForRowGroups(t.rows, [&](int64_t r, auto nr) { Scores<nr()>(r, kb); });
      for (int64_t r = 0; r < t.rows; ++r) {
        MaskScores(r, kb, bm);
        UpdateSoftmax(r, kb.na, res);
      }
      ForRowGroups(t.rows, [&](int64_t r, auto nr) {
        WeightedSum<nr()>(Acc(r), dims_.dv_pad, S(r), kBlockKv, kb.v, kb.na, dims_.dv);
      });
    }
  }

 private:
  float* Q(int64_t r) const { return s_.q + r * dims_.d_pad; }
  float* Acc(int64_t r) const { return s_.acc + r * dims_.dv_pad; }
  float* S(int64_t r) const { return s_.s + r * kBlockKv; }

  // Calls f(r, nr) for groups [r, r + nr) of the rows, nr (a compile-time constant) at most
  // kRowGroup.
  template <class F>
  static void ForRowGroups(int64_t rows, F f) {
    int64_t r = 0;
    for (; r + kRowGroup <= rows; r += kRowGroup) f(r, std::integral_constant<int, kRowGroup>());
    if constexpr (kRowGroup > 2) {
      for (; r + 2 <= rows; r += 2) f(r, std::integral_constant<int, 2>());
    }
    for (; r < rows; ++r) f(r, std::integral_constant<int, 1>());
  }

  // S[r][a] = q_r . k_a for rows [r0, r0 + NR).
  template <int NR>
  void Scores(int64_t r0, const KeyBlock<TK, TV>& kb) {
    const int64_t d = dims_.d, q_stride = dims_.d_pad;
    int64_t a = 0;
    for (; a + kKeyGroup <= kb.na; a += kKeyGroup) {
      Dots<NR, kKeyGroup>(Q(r0), q_stride, kb.k + a, d, S(r0) + a, kBlockKv);
    }
    for (; a < kb.na; ++a) Dots<NR, 1>(Q(r0), q_stride, kb.k + a, d, S(r0) + a, kBlockKv);
  }

  // Adds row r's mask values to its scores; -inf where the mask hides a key from the row.
  void MaskScores(int64_t r, const KeyBlock<TK, TV>& kb, const BlockMask& bm) {
    if (bm.same && !bm.additive) return;
    float* s = S(r);
    const float* values = bm.additive ? bm.values[r] : nullptr;  // nullptr for runs.
    for (int64_t a = 0; a < kb.na; ++a) {
      const int jj = kb.idx[a];
      s[a] = (bm.vis[r] >> jj & 1u) == 0 ? kNegInf : values != nullptr ? s[a] + values[jj] : s[a];
    }
  }

  // Turns row r's scores into weights exp(s - m) under the updated running max m, rescaling
  // what the row accumulated so far. A row that sees none of the keys gets weights 0.
  void UpdateSoftmax(int64_t r, int64_t na, TileResult* res) {
    // -inf up to a whole vector (kBlockKv is a multiple of it): neutral in the max, exp 0 in
    // the sum, and no scalar tail of exps in a short last block.
    const int64_t n = CeilDiv(na, kVectorFloats) * kVectorFloats;
    std::fill(S(r) + na, S(r) + n, kNegInf);
    const float block_max = MaxOf(S(r), n);
    if (block_max == kNegInf) {
      std::fill(S(r), S(r) + na, 0.0f);
      return;
    }
    const float m = std::max(res->m[r], block_max);
    // 0 on the first visible block; often exactly 1 (no new max): skip the exp then.
    const float rescale = m == res->m[r] ? 1.0f : std::exp(res->m[r] - m);
    if (rescale != 1.0f) simd::ScaleRow(Acc(r), rescale, dims_.dv);
    res->l[r] = res->l[r] * rescale + simd::ExpShiftedRowSum(S(r), m, n);
    res->m[r] = m;
  }

  const Problem& pr_;
  const Dims& dims_;
  const Scratch& s_;
};

// ---------------------------------------------------------------------------------------
// LaneKernel: rows in lanes.

#if defined(TG_SIMD)
// Per lane (tile row) the bit set of keys it sees, to hide keys lane by lane.
#if defined(TG_SIMD_AVX512)
class LaneBits {
 public:
  explicit LaneBits(const uint32_t* vis) : bits_(_mm512_loadu_si512(vis)) {}
  // s in the lanes that see key jj, -inf in the others.
  VecF Keep(VecF s, int jj) const {
    const __mmask16 seen = _mm512_test_epi32_mask(bits_, _mm512_set1_epi32(1 << jj));
    return _mm512_mask_blend_ps(seen, Set1(kNegInf), s);
  }

 private:
  __m512i bits_;
};
#else
class LaneBits {
 public:
  explicit LaneBits(const uint32_t* vis)
      : bits_(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vis))) {}
  VecF Keep(VecF s, int jj) const {
    const __m256i bit = _mm256_and_si256(bits_, _mm256_set1_epi32(1 << jj));
    const __m256i hidden = _mm256_cmpeq_epi32(bit, _mm256_setzero_si256());
    return _mm256_blendv_ps(s, Set1(kNegInf), _mm256_castsi256_ps(hidden));
  }

 private:
  __m256i bits_;
};
#endif

// Where a block's K (or V) rows are as f32: key j0 + jj at base + jj * stride.
struct BlockRows {
  const float* base;
  int64_t stride;
};

// f32 K or V rows for the lane kernel: dense f32 in place; else converted once per thread
// and KV head into head staging (block by block, as first needed), or when that does not
// fit, the block's visible rows per tile.
class KvStage {
 public:
  KvStage(const Tensor& t, const KvSource& src, int64_t pad, float* head, uint8_t* staged,
          float* block)
      : t_(t), src_(src), pad_(pad), head_(head), staged_(staged), block_(block) {}

  BlockRows Get(const Tile& tile, int64_t j0, int64_t n, const KeyList& keys) {
    if (Scratch::InPlaceF32(t_)) {
      return {src_.Row<float>(j0, tile, nullptr), src_.RowStride() / int64_t{sizeof(float)}};
    }
    if (head_ == nullptr) {
      for (int64_t a = 0; a < keys.na; ++a) {
        src_.CopyF32(j0 + keys.idx[a], tile, block_ + keys.idx[a] * pad_);
      }
      return {block_, pad_};
    }
    if (tile.b != b_ || tile.hk != hk_) {  // a new head: nothing of it staged yet.
      std::fill(staged_, staged_ + CeilDiv(t_.ne[1], kBlockKv), uint8_t{0});
      b_ = tile.b;
      hk_ = tile.hk;
    }
    float* rows = head_ + j0 * pad_;
    // The whole block, so that any tile can use it; rows no row sees are converted, never used.
    if (!staged_[j0 / kBlockKv]) {
      for (int64_t jj = 0; jj < n; ++jj) src_.CopyF32(j0 + jj, tile, rows + jj * pad_);
      staged_[j0 / kBlockKv] = 1;
    }
    return {rows, pad_};
  }

 private:
  const Tensor& t_;
  const KvSource& src_;
  const int64_t pad_;
  float* head_;
  uint8_t* staged_;
  float* block_;
  int64_t b_ = -1, hk_ = -1;  // the head in head_.
};

class LaneKernel {
 public:
  explicit LaneKernel(const Problem& pr)
      : pr_(pr),
        dims_(pr.dims),
        s_(pr.s),
        k_stage_(*pr.dst.src[1], pr.k, dims_.d_pad, s_.k_head, s_.k_staged, s_.k_rows),
        v_stage_(*pr.dst.src[2], pr.v, dims_.dv_pad, s_.v_head, s_.v_staged, s_.v_rows) {}

  // Attends the tile's rows to keys [k0, k1).
  void Run(const Tile& t, int64_t k0, int64_t k1, TileResult* res) {
    std::fill(s_.q, s_.q + dims_.d * kLanes, 0.0f);  // idle lanes: q = 0, harmless.
    for (int64_t r = 0; r < t.rows; ++r) pr_.LoadQRow(t, r, s_.q + r, kLanes);
    std::fill(s_.ot, s_.ot + dims_.dv * kLanes, 0.0f);
    VecF m = Set1(kNegInf), l = Set1(0.0f);
    KeyList keys;
    BlockMask bm;
    TileMask tm;
    pr_.mask.Prepare(t, &tm);
    int64_t begin, end;
    pr_.mask.KeyRange(tm, k0, k1, &begin, &end);
    for (int64_t j0 = begin; j0 < end; j0 += kBlockKv) {
      const int64_t n = std::min(kBlockKv, k1 - j0);
      if (!pr_.mask.Read(tm, j0, n, &bm)) continue;
      keys.List(bm.any);
      const VecF m_new = simd::Max(m, Scores(keys, k_stage_.Get(t, j0, n, keys), bm, t.rows));
      const VecF offset = simd::Max(m_new, Set1(kLowest));
      const VecF rescale = simd::Exp(simd::Sub(m, offset));  // 0 on a row's first keys.
      l = simd::Fmadd(l, rescale, Weights(keys.na, offset));
      m = m_new;
      AccumulateV(keys, v_stage_.Get(t, j0, n, keys), rescale);
    }
    Finish(t, m, l, res);
  }

 private:
  float* St(int64_t a) const { return s_.s + a * kLanes; }
  float* Ot(int64_t c) const { return s_.ot + c * kLanes; }

  // St[a] = q^T . k_a (+ mask) per lane, -inf in lanes whose row does not see key a;
  // returns the lane-wise max.
  VecF Scores(const KeyList& keys, const BlockRows& k, const BlockMask& bm, int64_t rows) {
    if (bm.additive) TransposeMask(keys, bm, rows);
    // A head size known at compile time unrolls the dot products: small heads then keep
    // their key pointers in registers.
    if (dims_.d == kSmallHead) return ScoresOf<kSmallHead>(keys, k, bm);
    return ScoresOf<0>(keys, k, bm);
  }

  template <int kD>
  VecF ScoresOf(const KeyList& keys, const BlockRows& k, const BlockMask& bm) {
    const LaneBits vis(bm.vis);
    VecF block_max = Set1(kNegInf);
    int64_t a = 0;
    for (; a + kLaneKeyGroup <= keys.na; a += kLaneKeyGroup) {
      block_max = simd::Max(block_max, ScoreKeys<kLaneKeyGroup, kD>(keys, a, k, bm, vis));
    }
    for (; a + kKeyGroup <= keys.na; a += kKeyGroup) {
      block_max = simd::Max(block_max, ScoreKeys<kKeyGroup, kD>(keys, a, k, bm, vis));
    }
    for (; a < keys.na; ++a) {
      block_max = simd::Max(block_max, ScoreKeys<1, kD>(keys, a, k, bm, vis));
    }
    return block_max;
  }

  // Scores of keys a0 .. a0 + N - 1 (head size kD, or dims_.d when 0).
  template <int N, int kD>
  VecF ScoreKeys(const KeyList& keys, int64_t a0, const BlockRows& rows, const BlockMask& bm,
                 const LaneBits& vis) {
    const int64_t d = kD > 0 ? kD : dims_.d;
    const float* k[N];
    VecF s[N];
    for (int i = 0; i < N; ++i) {
      k[i] = rows.base + keys.idx[a0 + i] * rows.stride;
      s[i] = Set1(0.0f);
    }
    for (int64_t c = 0; c < d; ++c) {
      const VecF qc = Load(s_.q + c * kLanes);
      for (int i = 0; i < N; ++i) s[i] = simd::Fmadd(qc, Set1(k[i][c]), s[i]);
    }
    VecF max = Set1(kNegInf);
    for (int i = 0; i < N; ++i) {
      if (bm.additive) s[i] = simd::Add(s[i], Load(s_.mt + (a0 + i) * kLanes));
      if (!bm.same) s[i] = vis.Keep(s[i], keys.idx[a0 + i]);
      Store(St(a0 + i), s[i]);
      max = simd::Max(max, s[i]);
    }
    return max;
  }

  // mt[a][r] = the mask value of listed key a for row r (0 in idle lanes).
  void TransposeMask(const KeyList& keys, const BlockMask& bm, int64_t rows) {
    for (int64_t a = 0; a < keys.na; ++a) {
      float* mt = s_.mt + a * kLanes;
      for (int64_t r = 0; r < kLanes; ++r) {
        mt[r] = r < rows && bm.values[r] != nullptr ? bm.values[r][keys.idx[a]] : 0.0f;
      }
    }
  }

  // St[a] = exp(St[a] - offset) in place; returns their lane-wise sum.
  VecF Weights(int64_t na, VecF offset) {
    VecF sum = Set1(0.0f);
    for (int64_t a = 0; a < na; ++a) {
      const VecF p = simd::Exp(simd::Sub(Load(St(a)), offset));
      Store(St(a), p);
      sum = simd::Add(sum, p);
    }
    return sum;
  }

  // Ot = Ot * rescale + sum_a St[a] * v_a, kColumnGroup columns at a time in registers.
  void AccumulateV(const KeyList& keys, const BlockRows& v, VecF rescale) {
    int64_t c = 0;
    for (; c + kColumnGroup <= dims_.dv; c += kColumnGroup) {
      AccumulateColumns<kColumnGroup>(keys, v, c, rescale);
    }
    if constexpr (kColumnGroup > 8) {
      for (; c + 8 <= dims_.dv; c += 8) AccumulateColumns<8>(keys, v, c, rescale);
    }
    for (; c + 4 <= dims_.dv; c += 4) AccumulateColumns<4>(keys, v, c, rescale);
    for (; c < dims_.dv; ++c) AccumulateColumns<1>(keys, v, c, rescale);
  }

  template <int N>
  void AccumulateColumns(const KeyList& keys, const BlockRows& rows, int64_t c0, VecF rescale) {
    VecF o[N];
    for (int i = 0; i < N; ++i) o[i] = simd::Mul(Load(Ot(c0 + i)), rescale);
    for (int64_t a = 0; a < keys.na; ++a) {
      const VecF p = Load(St(a));
      const float* v = rows.base + keys.idx[a] * rows.stride + c0;
      for (int i = 0; i < N; ++i) o[i] = simd::Fmadd(p, Set1(v[i]), o[i]);
    }
    for (int i = 0; i < N; ++i) Store(Ot(c0 + i), o[i]);
  }

  // Back to rows: the result's m, l and output rows.
  void Finish(const Tile& t, VecF m, VecF l, TileResult* res) {
    alignas(64) float mv[kLanes], lv[kLanes];
    Store(mv, m);
    Store(lv, l);
    for (int64_t r = 0; r < t.rows; ++r) {
      res->m[r] = mv[r];
      res->l[r] = lv[r];
      float* acc = s_.acc + r * dims_.dv_pad;
      for (int64_t c = 0; c < dims_.dv; ++c) acc[c] = Ot(c)[r];
    }
    res->acc = s_.acc;
    res->stride = dims_.dv_pad;
  }

  const Problem& pr_;
  const Dims& dims_;
  const Scratch& s_;
  KvStage k_stage_, v_stage_;
};
#endif  // TG_SIMD

// ---------------------------------------------------------------------------------------
// Driver.

float* OutRow(const Problem& pr, const Tile& t, int64_t r) {
  return reinterpret_cast<float*>(static_cast<uint8_t*>(pr.dst.data) +
                                  t.Head(r, pr.dims) * pr.dst.nb[1] +
                                  t.Pos(r, pr.dims) * pr.dst.nb[2] + t.b * pr.dst.nb[3]);
}

// Item i's result: normalized into dst, or, when keys are split, kept as partial state
// (m, l, acc) for the merge.
void Emit(const Problem& pr, const Plan& plan, const Tile& t, int64_t item, const TileResult& res,
          float* partials) {
  const int64_t dv = pr.dims.dv;
  for (int64_t r = 0; r < t.rows; ++r) {
    const float* acc = res.acc + r * res.stride;
    if (plan.n_split == 1) {
      float* out = OutRow(pr, t, r);
      const float inv = res.l[r] > 0.0f ? 1.0f / res.l[r] : 0.0f;  // fully masked: zeros.
      for (int64_t c = 0; c < dv; ++c) out[c] = acc[c] * inv;
      continue;
    }
    float* slot = partials + (item * plan.tile_rows + r) * (dv + 2);
    slot[0] = res.m[r];
    slot[1] = res.l[r];
    std::copy(acc, acc + dv, slot + 2);
  }
}

// Combines the key chunks' partial states of this thread's share of rows.
void MergeSplits(const Problem& pr, const Plan& plan, const float* partials, int ith, int nth) {
  const int64_t dv = pr.dims.dv;
  int64_t begin, end;
  SplitRange(plan.n_tiles * plan.tile_rows, ith, nth, &begin, &end);
  for (int64_t i = begin; i < end; ++i) {
    const int64_t tile = i / plan.tile_rows, r = i % plan.tile_rows;
    const Tile t = plan.TileAt(tile, pr.dims);
    if (r >= t.rows) continue;
    auto slot = [&](int64_t split) {
      return partials + ((tile * plan.n_split + split) * plan.tile_rows + r) * (dv + 2);
    };
    float m = kNegInf;
    for (int64_t sp = 0; sp < plan.n_split; ++sp) m = std::max(m, slot(sp)[0]);
    float* out = OutRow(pr, t, r);
    std::fill(out, out + dv, 0.0f);
    if (m == kNegInf) continue;  // no chunk saw a key: zeros.
    float l = 0.0f;
    for (int64_t sp = 0; sp < plan.n_split; ++sp) {
      const float* p = slot(sp);
      if (p[0] == kNegInf) continue;
      const float w = std::exp(p[0] - m);
      l += w * p[1];
      for (int64_t c = 0; c < dv; ++c) out[c] += w * p[2 + c];
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t c = 0; c < dv; ++c) out[c] *= inv;
  }
}

// Runs this thread's items: every nth one (see TileAt for why that balances).
template <typename Kernel>
void RunItems(Kernel kernel, const Problem& pr, const Plan& plan, float* partials, int ith,
              int nth) {
  TileResult res;
  for (int64_t i = ith; i < plan.Items(); i += nth) {
    const Tile t = plan.TileAt(i / plan.n_split, pr.dims);
    const int64_t k0 = i % plan.n_split * plan.chunk;
    kernel.Run(t, k0, std::min(pr.dims.n_kv, k0 + plan.chunk), &res);
    Emit(pr, plan, t, i, res, partials);
  }
}

void RunThreadItems(const Problem& pr, const Plan& plan, float* partials, int ith, int nth) {
#if defined(TG_SIMD)
  if (pr.dims.lanes) return RunItems(LaneKernel(pr), pr, plan, partials, ith, nth);
#endif
  if constexpr (kF16Direct) {
    const bool k16 = pr.k.DenseF16(), v16 = pr.v.DenseF16();
    if (k16 && v16)
      return RunItems(RowKernel<uint16_t, uint16_t>(pr), pr, plan, partials, ith, nth);
    if (k16) return RunItems(RowKernel<uint16_t, float>(pr), pr, plan, partials, ith, nth);
    if (v16) return RunItems(RowKernel<float, uint16_t>(pr), pr, plan, partials, ith, nth);
  }
  RunItems(RowKernel<float, float>(pr), pr, plan, partials, ith, nth);
}

}  // namespace

size_t FlashAttnWorkSize(const Tensor* dst, int nth) {
  const Dims dims(*dst);
  return ScratchBytes(dims, *dst) * nth +
         static_cast<size_t>(Plan(dims, nth).PartialFloats(dims)) * sizeof(float);
}

void ComputeFlashAttn(const ComputeParams& p, Tensor* dst) {
  const Dims dims(*dst);
  const Plan plan(dims, p.nth);
  const size_t scratch_bytes = ScratchBytes(dims, *dst);
  auto* wdata = static_cast<uint8_t*>(p.wdata);
  const Problem pr(*dst, dims, wdata + scratch_bytes * p.ith);
  pr.mask.Reset();
  auto* partials = reinterpret_cast<float*>(wdata + scratch_bytes * p.nth);
  RunThreadItems(pr, plan, partials, p.ith, p.nth);
  if (plan.n_split == 1) return;
  p.Sync();  // every thread computes the same plan, so all or none reach this.
  MergeSplits(pr, plan, partials, p.ith, p.nth);
}

}  // namespace tg::cpu
