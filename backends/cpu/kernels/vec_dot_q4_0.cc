// SIMD dot kernels for Q4_0 weights against Q8_0-quantized activations.
//
// Q4_0 is the format where decode is closest to compute-bound (18 bytes carry 32 weights), so
// the AVX-512 kernel avoids per-block scalar work: it takes 16 blocks (288 bytes) at a time,
// gathers the 4-bit quants of 4 blocks into one register with a byte permute (VBMI), multiplies
// them as unsigned bytes with VNNI, reduces the 16 per-block sums into one vector and applies
// the 16 weight and activation scales with two vector multiplies. The zero point (8) is folded
// into a per-block correction precomputed with the activations. To make this cheap the
// activations of each 16-block chunk are stored pre-arranged (ActQ4Chunk). Blocks past the
// last full chunk, and the AVX2 kernel, use one 32-byte vector per block.
#include <cstring>

#include "backends/cpu/kernels/quantize_act.h"
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

// Activations of 16 blocks, arranged for the kernel. Group g holds blocks 4g..4g+3: first
// their quants 0..15, then their quants 16..31 (matching the low / high nibbles). The
// reduction leaves block 4p + i in lane 4i + p, so scales and corrections use that order.
struct alignas(64) ActQ4Chunk {
  int8_t qs[kGroups][2][64];
  float d[kChunkBlocks];
  int32_t corr[kChunkBlocks];  // -8 * sum of the block's quants.
};
static_assert(sizeof(ActQ4Chunk) == 640);

constexpr int LaneOfBlock(int block) {
  return (block % kGroupBlocks) * kGroupBlocks + block / kGroupBlocks;
}
constexpr size_t kChunkActBytes = sizeof(ActQ4Chunk);
#else
constexpr int kChunkBlocks = 0;  // AVX2: every block takes the per-block path.
constexpr size_t kChunkActBytes = 0;
#endif

// A block of activations past the last full chunk: Q8_0 quants, the f32 scale, and minus the
// sum of the quants, so that unsigned weight nibbles (q + 8) need no per-block offset
// arithmetic: each of the 8 int32 lanes of a block's dot starts at -sum, which adds up to
// the -8 * sum the offset contributes.
struct ActQ4Tail {
  float d;
  int32_t neg_sum;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(ActQ4Tail) == 40);

int64_t FullChunks(int64_t nblocks) { return kChunkBlocks > 0 ? nblocks / kChunkBlocks : 0; }

size_t ActRowBytes(int64_t k) {
  const int64_t nblocks = k / kQK4_0;
  const int64_t chunks = FullChunks(nblocks);
  const size_t bytes = static_cast<size_t>(chunks) * kChunkActBytes +
                       static_cast<size_t>(nblocks - chunks * kChunkBlocks) * sizeof(ActQ4Tail);
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
      const int g = b / kGroupBlocks, i = b % kGroupBlocks;
      std::memcpy(&ch[c].qs[g][0][i * kHalfBlock], q, kHalfBlock);
      std::memcpy(&ch[c].qs[g][1][i * kHalfBlock], q + kHalfBlock, kHalfBlock);
      ch[c].d[LaneOfBlock(b)] = d;
      ch[c].corr[LaneOfBlock(b)] = -kQ4Offset * SumI8(q, kQK8_0);
    }
  }
#endif
  out += chunks * kChunkActBytes;
  ActQ4Tail* tail = reinterpret_cast<ActQ4Tail*>(out);
  for (int64_t i = chunks * kChunkBlocks; i < nblocks; ++i, ++tail) {
    tail->d = QuantizeBlockQ8_0(x + i * kQK4_0, tail->qs);
    tail->neg_sum = -SumI8(tail->qs, kQK8_0);
  }
}

// Blocks [first, nblocks) one 32-byte vector at a time; y[j] points at block `first`.
template <int R, int C>
void BlockwiseTile(int64_t first, int64_t nblocks, const char* a, size_t a_stride,
                   const ActQ4Tail* const* y, float (&sums)[R][C]) {
  __m256 acc[R][C] = {};
  for (int64_t i = first; i < nblocks; ++i) {
    __m256i yq[C], init[C];
    __m256 dy[C];
    for (int j = 0; j < C; ++j) {
      const ActQ4Tail& yb = y[j][i - first];
      yq[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb.qs));
      init[j] = _mm256_set1_epi32(yb.neg_sum);
      dy[j] = _mm256_set1_ps(yb.d);
    }
    for (int r = 0; r < R; ++r) {
      const BlockQ4_0* x = reinterpret_cast<const BlockQ4_0*>(a + r * a_stride) + i;
      const __m256i xq = NibblesToBytes(x->qs);
      const __m256 dx = _mm256_set1_ps(_cvtsh_ss(x->d));
      for (int j = 0; j < C; ++j) {
        const __m256 p = _mm256_cvtepi32_ps(DotU8I8Lanes(init[j], xq, yq[j]));
        acc[r][j] = _mm256_fmadd_ps(p, _mm256_mul_ps(dx, dy[j]), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) sums[r][j] += HorizontalSum(acc[r][j]);
  }
}

#if defined(TG_CPU_AVX512)
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

// The 16 blocks of one weight row chunk, unpacked: quants as unsigned bytes and f32 scales.
struct UnpackedChunk {
  __m512i low[kGroups];
  __m512i high[kGroups];
  __m512 d;
};

inline UnpackedChunk UnpackChunk(const uint8_t* p, const ChunkConsts& c) {
  UnpackedChunk u;
  __m512i first[kGroups], second[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    first[g] = _mm512_loadu_si512(p + kGroupBytes * g);
    // The last group needs 8 bytes of its second load; masking keeps the read in bounds.
    second[g] = g + 1 < kGroups ? _mm512_loadu_si512(p + kGroupBytes * g + 64)
                                : _mm512_maskz_loadu_epi8(0xFF, p + kGroupBytes * g + 64);
    const __m512i q = _mm512_permutex2var_epi8(first[g], c.idx_qs, second[g]);
    u.low[g] = _mm512_and_si512(q, c.low4);
    u.high[g] = _mm512_and_si512(_mm512_srli_epi16(q, 4), c.low4);
  }
  // Loads 0 and 2 cover chunk bytes 0..127 and 144..271, where the 16 scales live.
  const __m512i d =
      _mm512_mask_blend_epi8(c.d_hi, _mm512_permutex2var_epi8(first[0], c.idx_d_lo, second[0]),
                             _mm512_permutex2var_epi8(first[2], c.idx_d_hi, second[2]));
  u.d = _mm512_cvtph_ps(_mm512_castsi512_si256(d));
  return u;
}

// Adds dx * dy * (q . y) of the chunk's 16 blocks to the 16 lanes of acc.
inline __m512 ChunkDot(const UnpackedChunk& u, const ActQ4Chunk& y, __m512 acc) {
  __m512i s[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    const __m512i t =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.low[g], _mm512_load_si512(y.qs[g][0]));
    s[g] = _mm512_dpbusd_epi32(t, u.high[g], _mm512_load_si512(y.qs[g][1]));
  }
  // Each block's 4 partial sums sit in one 128-bit lane of its group: two unpack levels
  // leave block 4p + i's total in lane 4i + p.
  const __m512i t0 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
  const __m512i t1 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
  __m512i sum = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  sum = _mm512_add_epi32(sum, _mm512_load_si512(y.corr));
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

template <int R, int C>
void Q4Tile(int64_t k, const char* a, size_t a_stride, const void* const* b, float* const* c) {
  const int64_t nblocks = k / kQK4_0;
  const int64_t chunks = FullChunks(nblocks);
  float sums[R][C] = {};
#if defined(TG_CPU_AVX512)
  if (chunks > 0) ChunkTile<R, C>(chunks, a, a_stride, b, sums);
#endif
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

// 4 x 2 accumulators leave registers for an unpacked chunk (AVX-512) or the per-block
// temporaries (AVX2).
constexpr int kColsPerPass = 2;

// One register tile for QuantTile.
constexpr auto kQ4Tile = [](auto rows, auto cols, int64_t k, const char* a, size_t a_stride,
                            const void* const* b, float* const* c) {
  Q4Tile<decltype(rows)::value, decltype(cols)::value>(k, a, a_stride, b, c);
};

}  // namespace

const DotKernels kDotQ4_0{FromF32, ActRowBytes, QuantTile<kColsPerPass, decltype(kQ4Tile)>, 1};

}  // namespace tg::cpu::simd

#endif  // TG_CPU_SIMD
