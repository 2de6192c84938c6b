// SIMD dot kernels for Q4_0 weights against Q8_0-quantized activations.
//
// Q4_0 is the format where decode is closest to compute-bound (18 bytes carry 32 weights), so
// the AVX-512 kernel avoids per-block scalar work: it takes 16 blocks (288 bytes) at a time,
// gathers the 4-bit quants of 4 blocks into one register with a byte permute (VBMI) and
// transposes the four registers (4-byte groups) so that each 32-bit lane belongs to one
// block: then 8 VNNI multiplies of unsigned nibbles by the activations add up each block's
// dot in its own lane with no reduction, and two vector multiplies apply the 16 weight and
// activation scales. The unpacking is done once per weight row chunk for all the columns of a
// pass (up to 8: a decode of 8 sequences), the per-column work is 12 vector operations. The
// zero point (8) is folded into a per-block correction precomputed with the activations. To
// make this cheap the activations of each 16-block chunk are stored pre-arranged
// (ActQ4Chunk). Blocks past the last full chunk use one 32-byte vector per block.
//
// AVX2 (no VNNI, no byte permutes) puts one weight row in each 32-bit lane and takes 32 rows
// (four vectors of lanes) at a time: the 16 quant bytes of each 8 rows' block are transposed
// 4 bytes at a time (4 unpacks of 2 rows, 4 of 4) so that each of 8 vectors holds the same 4
// quants of every row, stored as signed q - 8 for 8 blocks at a time. The activations are kept
// as unsigned q + 128, so that a column's 4 quants broadcast once serve as VPMADDUBSW's
// unsigned operand against the 4 vectors of rows; 8 of them summed in 16 bits (8 x 2 x 255 x 8
// < 2^15, exact), one VPMADDWD, the per-row correction -128 * sum(q - 8), one conversion and
// one FMA give 8 rows. Each row's result is the sum over blocks, in block order, of fma(exact
// block dot, dx * dy). One column alone (a decode of one sequence) is not worth the staging:
// 8 rows at a time keep their unsigned quants in registers against the column's signed quants
// broadcast and a per-column correction, which gives the same exact dots and so the same bits.
// Prompts take these tiles too (AVX2 packs no Q4_0 for qgemm.h: 1.4-1.7x slower), so decode
// and prefill give the same bits. The next rows are prefetched while these are computed (rows
// streamed side by side defeat the hardware prefetcher: a 276 MB matrix-vector product of 8
// rows at a time ran at 0.67x of one row at a time without it, 1.35x with it, 2 threads on an
// AVX2 EPYC).
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/row_lanes.h"
#include "backends/cpu/kernels/vec_dot_simd.h"

#if defined(TG_CPU_SIMD)

namespace tg::cpu::simd {
namespace {

constexpr int kQ4Offset = 8;  // Q4_0 quants are stored as q + 8.
constexpr int kHalfBlock = kQK4_0 / 2;
constexpr size_t kRowAlign = 64;  // keeps every activation row's chunks 64-byte aligned.

#if defined(TG_CPU_AVX512)
constexpr int kChunkBlocks = 16;
constexpr int kGroupBlocks = 4;  // blocks whose quants fill one 64-byte register.
constexpr int kGroups = kChunkBlocks / kGroupBlocks;
constexpr int kChunkBytes = kChunkBlocks * static_cast<int>(sizeof(BlockQ4_0));  // 288
constexpr int kGroupBytes = kGroupBlocks * static_cast<int>(sizeof(BlockQ4_0));  // 72

// Activations of 16 blocks, arranged for the kernel: block b owns 32-bit lane LaneOfBlock(b)
// of every vector, qs[h][q] holding there its quants 16h + 4q .. 16h + 4q + 3 (h = 0: those
// that meet the low nibbles, 1: the high ones). Scales and corrections use the same lanes.
constexpr int kQuads = kHalfBlock / 4;  // 4-byte groups of a half block.
struct alignas(64) ActQ4Chunk {
  int8_t qs[2][kQuads][64];
  float d[kChunkBlocks];
  int32_t corr[kChunkBlocks];  // -8 * sum of the block's quants.
};
static_assert(sizeof(ActQ4Chunk) == 640);

constexpr int LaneOfBlock(int block) {
  return (block % kGroupBlocks) * kGroupBlocks + block / kGroupBlocks;
}
constexpr size_t kChunkActBytes = sizeof(ActQ4Chunk);
#else
constexpr int kChunkBlocks = 0;  // AVX2: every block is an ActQ4Tail (then an ActQ4Unsigned).
constexpr size_t kChunkActBytes = 0;
#endif

// A block of activations past the last full chunk (AVX2: every block): Q8_0 quants, the f32
// scale, and the correction for unsigned weight nibbles (q + 8), -8 * sum of the quants,
// spread over the lanes that add up a block's dot: AVX-512's per-block path starts each of
// its 8 lanes at -sum, AVX2's one lane per weight row at the whole -8 * sum.
#if defined(TG_CPU_AVX512)
constexpr int kTailCorrLanes = 8;
#else
constexpr int kTailCorrLanes = 1;
#endif
struct ActQ4Tail {
  float d;
  int32_t corr;  // -8 * sum(qs) / kTailCorrLanes.
  int8_t qs[kQK8_0];
};
static_assert(sizeof(ActQ4Tail) == 40);

#if !defined(TG_CPU_AVX512)
// AVX2 rows hold after their ActQ4Tails (for one column against unsigned weight nibbles) the
// same quants offset to unsigned, for several columns against signed weights (RowGroups).
constexpr int kActOffset = 128;
struct ActQ4Unsigned {
  float d;
  uint8_t qs[kQK8_0];  // q + 128.
};
static_assert(sizeof(ActQ4Unsigned) == 36);
constexpr size_t kUnsignedBlockBytes = sizeof(ActQ4Unsigned);
#else
constexpr size_t kUnsignedBlockBytes = 0;
#endif

int64_t FullChunks(int64_t nblocks) { return kChunkBlocks > 0 ? nblocks / kChunkBlocks : 0; }

size_t ActRowBytes(int64_t k) {
  const int64_t nblocks = k / kQK4_0;
  const int64_t chunks = FullChunks(nblocks);
  const size_t bytes = static_cast<size_t>(chunks) * kChunkActBytes +
                       static_cast<size_t>(nblocks - chunks * kChunkBlocks) * sizeof(ActQ4Tail) +
                       static_cast<size_t>(nblocks) * kUnsignedBlockBytes;
  return (bytes + kRowAlign - 1) / kRowAlign * kRowAlign;
}

void FromF32(const float* x, void* y, int64_t k) {
  const int64_t nblocks = k / kQK4_0;
  const int64_t chunks = FullChunks(nblocks);
  char* out = static_cast<char*>(y);
#if defined(TG_CPU_AVX512)
  ActQ4Chunk* ch = reinterpret_cast<ActQ4Chunk*>(out);
  for (int64_t c = 0; c < chunks; ++c) {
    for (int b = 0; b < kChunkBlocks; ++b) {
      int8_t q[kQK8_0];
      const float d = QuantizeBlockQ8_0(x + (c * kChunkBlocks + b) * kQK4_0, q);
      const int lane = LaneOfBlock(b);
      for (int h = 0; h < 2; ++h) {
        for (int quad = 0; quad < kQuads; ++quad) {
          std::memcpy(&ch[c].qs[h][quad][4 * lane], q + h * kHalfBlock + 4 * quad, 4);
        }
      }
      ch[c].d[LaneOfBlock(b)] = d;
      ch[c].corr[LaneOfBlock(b)] = -kQ4Offset * SumI8(q, kQK8_0);
    }
  }
#endif
  out += chunks * kChunkActBytes;
  ActQ4Tail* tail = reinterpret_cast<ActQ4Tail*>(out);
#if !defined(TG_CPU_AVX512)
  ActQ4Unsigned* unsigned_blocks = reinterpret_cast<ActQ4Unsigned*>(tail + nblocks);
#endif
  for (int64_t i = chunks * kChunkBlocks; i < nblocks; ++i, ++tail) {
    tail->d = QuantizeBlockQ8_0(x + i * kQK4_0, tail->qs);
    tail->corr = -(kQ4Offset / kTailCorrLanes) * SumI8(tail->qs, kQK8_0);
#if !defined(TG_CPU_AVX512)
    ActQ4Unsigned& u = unsigned_blocks[i];
    u.d = tail->d;
    for (int j = 0; j < kQK8_0; ++j) u.qs[j] = static_cast<uint8_t>(tail->qs[j] + kActOffset);
#endif
  }
}

#if defined(TG_CPU_AVX512)
// Blocks [first, nblocks) one 32-byte vector at a time; y[j] points at block `first`.
template <int R, int C>
void BlockwiseTile(int64_t first, int64_t nblocks, const char* a, size_t a_stride,
                   const ActQ4Tail* const* y, float (&sums)[R][C]) {
  __m256 acc[R][C] = {};
  for (int64_t i = first; i < nblocks; ++i) {
    for (int r = 0; r < R; ++r) {
      const BlockQ4_0* x = reinterpret_cast<const BlockQ4_0*>(a + r * a_stride) + i;
      const __m256i xq = NibblesToBytes(x->qs);
      const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x->d));
      for (int j = 0; j < C; ++j) {
        const ActQ4Tail& yb = y[j][i - first];
        const __m256i yq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb.qs));
        const __m256 p = _mm256_cvtepi32_ps(DotU8I8Lanes(_mm256_set1_epi32(yb.corr), xq, yq));
        acc[r][j] = _mm256_fmadd_ps(p, _mm256_mul_ps(dx, _mm256_set1_ps(yb.d)), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) sums[r][j] += HorizontalSum(acc[r][j]);
  }
}

struct ChunkConsts {
  __m512i idx_qs;    // byte permute gathering the quants of 4 blocks from 72 bytes.
  __m512i idx_d_lo;  // scales of blocks 0..7 (from bytes 0..127 of the chunk), in lane order.
  __m512i idx_d_hi;  // scales of blocks 8..15 (from bytes 144..271).
  __mmask64 d_hi;    // which scale bytes come from the second permute.
  __m512i low4;
};

ChunkConsts MakeChunkConsts() {
  alignas(64) uint8_t qs[64], lo[64] = {}, hi[64] = {};
  for (int b = 0; b < kGroupBlocks; ++b) {
    for (int j = 0; j < kHalfBlock; ++j) {
      qs[b * kHalfBlock + j] = static_cast<uint8_t>(b * sizeof(BlockQ4_0) + 2 + j);
    }
  }
  uint64_t hi_mask = 0;
  for (int b = 0; b < kChunkBlocks; ++b) {
    const int lane = LaneOfBlock(b);
    const int src = (b < 8 ? b : b - 8) * static_cast<int>(sizeof(BlockQ4_0));
    uint8_t* idx = b < 8 ? lo : hi;
    idx[2 * lane] = static_cast<uint8_t>(src);
    idx[2 * lane + 1] = static_cast<uint8_t>(src + 1);
    if (b >= 8) hi_mask |= uint64_t{3} << (2 * lane);
  }
  ChunkConsts c;
  c.idx_qs = _mm512_load_si512(qs);
  c.idx_d_lo = _mm512_load_si512(lo);
  c.idx_d_hi = _mm512_load_si512(hi);
  c.d_hi = hi_mask;
  c.low4 = _mm512_set1_epi8(0x0F);
  return c;
}

// The 16 blocks of one weight row chunk, unpacked: quants as unsigned bytes, low[q] holding
// in block b's lane LaneOfBlock(b) its quants 4q .. 4q + 3 and high[q] 16 + 4q .. 16 + 4q + 3
// (ActQ4Chunk's layout), and f32 scales.
static_assert(kGroups == kQuads);
struct UnpackedChunk {
  __m512i low[kQuads];
  __m512i high[kQuads];
  __m512 d;
};

inline UnpackedChunk UnpackChunk(const uint8_t* p, const ChunkConsts& c) {
  UnpackedChunk u;
  __m512i first[kGroups], second[kGroups], q[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    first[g] = _mm512_loadu_si512(p + kGroupBytes * g);
    // The last group needs 8 bytes of its second load; masking keeps the read in bounds.
    second[g] = g + 1 < kGroups ? _mm512_loadu_si512(p + kGroupBytes * g + 64)
                                : _mm512_maskz_loadu_epi8(0xFF, p + kGroupBytes * g + 64);
    // 128-bit lane i: the 16 quant bytes of block 4g + i.
    q[g] = _mm512_permutex2var_epi8(first[g], c.idx_qs, second[g]);
  }
  // Transpose the 4-byte groups within each 128-bit lane: t[quad] holds, in 32-bit lane
  // 4i + g, bytes 4 quad .. 4 quad + 3 of block 4g + i (LaneOfBlock).
  const __m512i a0 = _mm512_unpacklo_epi32(q[0], q[1]), a1 = _mm512_unpackhi_epi32(q[0], q[1]);
  const __m512i a2 = _mm512_unpacklo_epi32(q[2], q[3]), a3 = _mm512_unpackhi_epi32(q[2], q[3]);
  const __m512i t[kQuads] = {_mm512_unpacklo_epi64(a0, a2), _mm512_unpackhi_epi64(a0, a2),
                             _mm512_unpacklo_epi64(a1, a3), _mm512_unpackhi_epi64(a1, a3)};
  for (int quad = 0; quad < kQuads; ++quad) {
    u.low[quad] = _mm512_and_si512(t[quad], c.low4);
    u.high[quad] = _mm512_and_si512(_mm512_srli_epi16(t[quad], 4), c.low4);
  }
  // Loads 0 and 2 cover chunk bytes 0..127 and 144..271, where the 16 scales live.
  const __m512i d =
      _mm512_mask_blend_epi8(c.d_hi, _mm512_permutex2var_epi8(first[0], c.idx_d_lo, second[0]),
                             _mm512_permutex2var_epi8(first[2], c.idx_d_hi, second[2]));
  u.d = _mm512_cvtph_ps(_mm512_castsi512_si256(d));
  return u;
}

// Adds dx * dy * (q . y) of the chunk's 16 blocks to the 16 lanes of acc. Two chains of 4
// multiply-adds (the low and the high nibbles) leave each block's exact integer dot in its lane.
inline __m512 ChunkDot(const UnpackedChunk& u, const ActQ4Chunk& y, __m512 acc) {
  __m512i lo = _mm512_load_si512(y.corr);
  __m512i hi = _mm512_setzero_si512();
  for (int quad = 0; quad < kQuads; ++quad) {
    lo = _mm512_dpbusd_epi32(lo, u.low[quad], _mm512_load_si512(y.qs[0][quad]));
    hi = _mm512_dpbusd_epi32(hi, u.high[quad], _mm512_load_si512(y.qs[1][quad]));
  }
  const __m512i sum = _mm512_add_epi32(lo, hi);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(u.d, _mm512_load_ps(y.d)), acc);
}

template <int R, int C>
void ChunkTile(int64_t chunks, const char* a, size_t a_stride, const void* const* b,
               float (&sums)[R][C]) {
  static const ChunkConsts consts = MakeChunkConsts();
  const ChunkConsts c = consts;
  __m512 acc[R][C] = {};
  const auto y = ActColumns<ActQ4Chunk, C>(b);
  for (int64_t ch = 0; ch < chunks; ++ch) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = reinterpret_cast<const uint8_t*>(a + r * a_stride) + ch * kChunkBytes;
      const UnpackedChunk u = UnpackChunk(p, c);
      for (int j = 0; j < C; ++j) acc[r][j] = ChunkDot(u, y[j][ch], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) sums[r][j] += _mm512_reduce_add_ps(acc[r][j]);
  }
}
#endif

#if !defined(TG_CPU_AVX512)
constexpr int kMaxGroups = 4;  // vectors of rows per tile, sharing each column's broadcasts.
constexpr int kTileRows = kLaneRows * kMaxGroups;
constexpr int kStageBlocks = 8;  // blocks transposed at a time, then met by every column.

// One block of 8 weight rows, transposed for the columns: q[g] holds quants 4g .. 4g + 3 (g <
// 4: the low nibbles, else 16 + 4(g - 4) ..) of row r, as signed q - 8, in 32-bit lane r.
struct StagedRows {
  __m256i q[8];
  __m256i corr;  // -128 * sum(q - 8) per row: undoes the activations' offset.
  __m256 d;
};

// The scales of block `at` of the 8 rows at row[0..7], row r in lane r.
inline __m256 RowScales(const char* const* row, size_t at) {
  uint16_t d[kLaneRows];
  for (int r = 0; r < kLaneRows; ++r) std::memcpy(&d[r], row[r] + at, sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_setr_epi16(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]));
}

// Stages block `at` of the 8 rows at row[0..7] for RowGroups' columns.
inline void StageRows(const char* const* row, size_t at, StagedRows& out) {
  __m256i q[8];
  TransposeNibbles(row, at + offsetof(BlockQ4_0, qs), q);
  // Each row's 32 quants add up to at most 480: bytewise over 8 vectors (<= 120), then
  // widened; sum(q - 8) = sum(q) - 256.
  __m256i sum8 = q[0];
  for (int g = 1; g < 8; ++g) sum8 = _mm256_add_epi8(sum8, q[g]);
  const __m256i sum =
      _mm256_madd_epi16(_mm256_maddubs_epi16(sum8, _mm256_set1_epi8(1)), _mm256_set1_epi16(1));
  out.corr = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(kQ4Offset * kQK4_0), sum), 7);
  for (int g = 0; g < 8; ++g) out.q[g] = _mm256_sub_epi8(q[g], _mm256_set1_epi8(kQ4Offset));
  out.d = RowScales(row, at);
}

// Rows [0, rows) (rows <= 8) of `a` against one activation column: c[r]. Each block's quants
// stay unsigned in registers, against the column's signed quants and its correction (staging
// them as RowGroups does costs more than one column's products). The integer dots are exact,
// so the bits equal RowGroups'. Missing rows read the last one; `next` and `ahead` prefetch as
// in RowGroups.
void OneColumn(int64_t nblocks, const char* a, size_t a_stride, int rows, const char* next,
               size_t ahead, const ActQ4Tail* y, float* c) {
  const char* row[kLaneRows];
  TileRowPointers(a, a_stride, rows, row);
  const size_t ahead_step = nblocks > 0 ? (ahead + nblocks - 1) / nblocks : 0;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nblocks; ++i) {
    const size_t at = i * sizeof(BlockQ4_0);
    PrefetchShare<_MM_HINT_T0>(next, i, ahead_step);
    __m256i q[8];
    TransposeNibbles(row, at + offsetof(BlockQ4_0, qs), q);
    const ActQ4Tail& yb = y[i];
    __m256i s16 = _mm256_maddubs_epi16(q[0], BroadcastQuad(yb.qs));
    for (int g = 1; g < 8; ++g) {
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[g], BroadcastQuad(yb.qs + 4 * g)));
    }
    const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(yb.corr));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                          _mm256_mul_ps(RowScales(row, at), _mm256_set1_ps(yb.d)), acc);
  }
  StoreLaneRows(acc, rows, c);
}

// Keeps the H running sums in registers between steps: without it GCC issues all of a
// column's 8 x H VPMADDUBSW first and spills their results (1.6x slower at 8 columns).
template <int H>
inline void KeepOrder(__m256i (&s)[H]) {
  if constexpr (H == 1) asm("" : "+x"(s[0]));
  if constexpr (H == 2) asm("" : "+x"(s[0]), "+x"(s[1]));
  if constexpr (H == 3) asm("" : "+x"(s[0]), "+x"(s[1]), "+x"(s[2]));
  if constexpr (H == 4) asm("" : "+x"(s[0]), "+x"(s[1]), "+x"(s[2]), "+x"(s[3]));
}

// Rows [0, rows) (rows <= 8 H) of `a` against `cols` activation columns: c[j][r]. While the
// blocks go by, the `ahead` bytes from `next` (the following rows) are prefetched.
template <int H>
void RowGroups(int64_t nblocks, const char* a, size_t a_stride, int rows, const char* next,
               size_t ahead, const ActQ4Unsigned* const* y, int cols, float* const* c) {
  const char* row[kLaneRows * H];
  TileRowPointers(a, a_stride, rows, row);
  const size_t ahead_step = nblocks > 0 ? (ahead + nblocks - 1) / nblocks : 0;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kMaxTileCols][H];
  for (int j = 0; j < cols; ++j) {
    for (int h = 0; h < H; ++h) acc[j][h] = _mm256_setzero_ps();
  }
  StagedRows stage[kStageBlocks][H];
  for (int64_t i0 = 0; i0 < nblocks; i0 += kStageBlocks) {
    const int n = static_cast<int>(std::min<int64_t>(kStageBlocks, nblocks - i0));
    for (int b = 0; b < n; ++b) {
      const int64_t i = i0 + b;
      // Into L2: the next 32 rows (36 KB for k = 2048) would evict the stage and the columns
      // from L1.
      PrefetchShare<_MM_HINT_T1>(next, i, ahead_step);
      for (int h = 0; h < H; ++h) {
        StageRows(row + kLaneRows * h, i * sizeof(BlockQ4_0), stage[b][h]);
      }
    }
    for (int j = 0; j < cols; ++j) {
      __m256 sums[H];
      for (int h = 0; h < H; ++h) sums[h] = acc[j][h];
      for (int b = 0; b < n; ++b) {
        const ActQ4Unsigned& yb = y[j][i0 + b];
        __m256i s[H];
        for (int h = 0; h < H; ++h) s[h] = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
          const __m256i yq = BroadcastQuad(yb.qs + 4 * g);
          for (int h = 0; h < H; ++h) {
            s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(yq, stage[b][h].q[g]));
          }
          KeepOrder(s);
        }
        const __m256 dy = _mm256_set1_ps(yb.d);
        for (int h = 0; h < H; ++h) {
          const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(s[h], ones), stage[b][h].corr);
          sums[h] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(stage[b][h].d, dy), sums[h]);
        }
      }
      for (int h = 0; h < H; ++h) acc[j][h] = sums[h];
    }
  }
  for (int j = 0; j < cols; ++j) {
    alignas(32) float out[kLaneRows * H];
    for (int h = 0; h < H; ++h) _mm256_store_ps(out + kLaneRows * h, acc[j][h]);
    std::memcpy(c[j], out, rows * sizeof(float));
  }
}

// The AVX2 tile entry: rows 32 at a time (the last up to 31 in as few vectors as they need),
// every column of the call (up to kMaxTileCols) over each staging of the weights.
void Q4TileAvx2(int64_t k, const void* a, size_t a_stride, int rows, const void* const* b, int cols,
                float* const* c) {
  const int64_t nblocks = k / kQK4_0;
  const char* base = static_cast<const char*>(a);
  if (cols == 1) {
    for (int r0 = 0; r0 < rows; r0 += kLaneRows) {
      const int n = std::min(kLaneRows, rows - r0);
      const int n_next = std::clamp(rows - r0 - kLaneRows, 0, kLaneRows);
      const char* at = base + r0 * a_stride;
      OneColumn(nblocks, at, a_stride, n, at + kLaneRows * a_stride, n_next * a_stride,
                static_cast<const ActQ4Tail*>(b[0]), c[0] + r0);
    }
    return;
  }
  const ActQ4Unsigned* y[kMaxTileCols];
  for (int j = 0; j < cols; ++j) {
    y[j] = reinterpret_cast<const ActQ4Unsigned*>(static_cast<const char*>(b[j]) +
                                                  nblocks * sizeof(ActQ4Tail));
  }
  for (int r0 = 0; r0 < rows; r0 += kTileRows) {
    const int n = std::min(kTileRows, rows - r0);
    const int n_next = std::clamp(rows - r0 - kTileRows, 0, kTileRows);
    const char* at = base + r0 * a_stride;
    const char* next = at + kTileRows * a_stride;
    const size_t ahead = n_next * a_stride;
    float* out[kMaxTileCols];
    for (int j = 0; j < cols; ++j) out[j] = c[j] + r0;
    switch ((n + kLaneRows - 1) / kLaneRows) {
      case 1:
        RowGroups<1>(nblocks, at, a_stride, n, next, ahead, y, cols, out);
        break;
      case 2:
        RowGroups<2>(nblocks, at, a_stride, n, next, ahead, y, cols, out);
        break;
      case 3:
        RowGroups<3>(nblocks, at, a_stride, n, next, ahead, y, cols, out);
        break;
      default:
        RowGroups<4>(nblocks, at, a_stride, n, next, ahead, y, cols, out);
        break;
    }
  }
}
#endif

#if defined(TG_CPU_AVX512)
template <int R, int C>
void Q4Tile(int64_t k, const char* a, size_t a_stride, const void* const* b, float* const* c) {
  const int64_t nblocks = k / kQK4_0;
  const int64_t chunks = FullChunks(nblocks);
  float sums[R][C] = {};
  if (chunks > 0) ChunkTile<R, C>(chunks, a, a_stride, b, sums);
  if (chunks * kChunkBlocks < nblocks) {
    const ActQ4Tail* tail[C];
    for (int j = 0; j < C; ++j) {
      tail[j] = reinterpret_cast<const ActQ4Tail*>(static_cast<const char*>(b[j]) +
                                                   chunks * kChunkActBytes);
    }
    BlockwiseTile<R, C>(chunks * kChunkBlocks, nblocks, a, a_stride, tail, sums);
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) c[j][r] = sums[r][j];
  }
}

// Columns per pass for 1..4 rows: up to 8 accumulators beside an unpacked chunk (9
// registers), so one row (decode streams weight rows one at a time) takes 8 columns per
// unpacking.
constexpr ColumnPasses kPasses{{8, 4, 2, 2}};

// One register tile for QuantTile.
constexpr auto kQ4Tile = [](auto rows, auto cols, int64_t k, const char* a, size_t a_stride,
                            const void* const* b, float* const* c) {
  Q4Tile<decltype(rows)::value, decltype(cols)::value>(k, a, a_stride, b, c);
};
#endif

}  // namespace

#if defined(TG_CPU_AVX512)
const DotKernels kDotQ4_0{FromF32, ActRowBytes, QuantTileByRows<kPasses, decltype(kQ4Tile)>, 1};
#else
const DotKernels kDotQ4_0{FromF32, ActRowBytes, Q4TileAvx2, kTileRows};
#endif

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
