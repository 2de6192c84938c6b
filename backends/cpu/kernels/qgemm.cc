// Packed GEMM for the 32-element block types (Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4), Q4_K and
// IQ4_XS against Q8_0 activations on AVX-512 VNNI and on AVX2 (prefill).
//
// The row-wise tile kernels spend most of their time on per-block scale arithmetic: every
// 32-element block of every (row, column) pair needs its own scale product and
// int-to-float conversion. Here a tile of 16 weight rows is first packed (per thread, once
// per column block, so the cost is spread over hundreds of activation columns) with the
// rows across the vector lanes: for block b, 8 vectors hold 4 consecutive quants of each
// row per lane, and one vector holds the 16 row scales. A column then costs, per block,
// 8 VPDPBUSD with its quants broadcast 4 at a time, one conversion, one scale multiply
// and one FMA for all 16 rows.
//
// VPDPBUSD multiplies unsigned by signed bytes, so the weights are stored unsigned (Q4_0:
// the raw nibble q + 8; Q5_0: q + 16; Q8_0: q + 128; IQ4_NL and MXFP4: their table level
// plus an offset, looked up while packing) and the activations signed; the offset times the
// block's activation sum is subtracted through the accumulator's initial value, which the
// activation format carries per block. Q5_1's minimum adds m * d_y * sum(q_y) per block.
//
// AVX2 has no VPDPBUSD: VPMADDUBSW multiplies the unsigned weight bytes by the signed
// activation bytes into 16-bit pair sums, and VPMADDWD against ones widens them. A pair sum
// must fit 16 bits, so the offsets stay small there: Q8_0 and IQ4_NL (whose levels reach
// +113) are packed signed (offset 0) and multiplied as |w| times the activation with w's
// sign (VPSIGNB). The 5-bit types and MXFP4 add 4 groups' pair sums in 16 bits before
// widening. A tile's 16 rows are two 8-lane halves. AVX2 packs no Q4_0: its decode tiles
// (vec_dot_q4_0.cc: 8 rows transposed into lanes per pass of columns, 16-bit sums over the
// whole block) ran prompts 1.4-1.7x faster than this GEMM (pp512, a 2048-wide model).
//
// Q4_K and IQ4_XS pack each 32-element sub-block as a block of its own: the scale d * scale_s
// (and Q4_K's minimum -dmin * min_s) is exact in f32 (an f16 times a 6-bit integer), so Q4_K
// is Q5_1's arithmetic with 4-bit quants and IQ4_XS is IQ4_NL's, against activations rounded
// as Q8_K (their decode tiles'). Their row-wise tiles unpack the scales again for every 2
// columns: this ran a qwen3moe Q4_K_M prompt (pp512, AVX2) 1.2x faster.
#include "backends/cpu/kernels/qgemm.h"

#include <cstring>
#include <utility>

#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/vec_dot_simd.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quants.h"

namespace tg::cpu {
namespace {

constexpr int kGroups = kQK8_0 / 4;  // 4-byte groups per block: one vector each.

// One block of activations: Q8_0 quants, the f32 scale, -offset * sum(quants) and, for
// weights with a minimum (Q5_1), d * sum(quants).
struct ActBlock {
  int8_t qs[kQK8_0];
  float d;
  int32_t corr;
  float ds;
};
static_assert(sizeof(ActBlock) == 44);

// One block of a packed tile: the 16 row scales and minimums (Q5_1; unused otherwise), then
// group g's quants of row r at q[g][4 r .. 4 r + 3].
struct alignas(64) PackedBlock {
  float d[kQGemmRows];
  float m[kQGemmRows];
  uint8_t q[kGroups][4 * kQGemmRows];
};
static_assert(sizeof(PackedBlock) == 640);

// The packed weights are unsigned bytes w = value + offset: Q4_0's nibble (q + 8), Q5_0's
// five bits (q + 16), Q5_1's five bits (its minimum is separate), Q8_0's q + 128, IQ4_NL's
// level + 128 (on AVX2 both signed: offset 0) and MXFP4's doubled E2M1 level + 12.
int WeightOffset(DType type) {
  switch (type) {
#if !defined(TG_CPU_AVX512)
    case DType::kQ8_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
      return 0;
#endif
    case DType::kQ4_0:
      return 8;
    case DType::kQ5_0:
      return 16;
    case DType::kQ5_1:
    case DType::kQ4_K:
      return 0;
    case DType::kMXFP4:
      return 12;
    default:
      return 128;
  }
}

#if defined(TG_CPU_SIMD)
// Where a block's fields are, and how its 32 quants become unsigned bytes.
struct PackLayout {
  size_t block_bytes;
  int scale_at;   // f16 scale (Q5_1 also an f16 minimum right after it); -1: E8M0 byte at 0.
  int high_at;    // 32-bit mask of fifth bits, -1 for none.
  int quants_at;  // nibbles or (Q8_0) bytes.
  bool nibbles;
  const int8_t* levels;  // nibble -> level table, or nullptr (the nibble is the quant).
};

PackLayout LayoutOf(DType type) {
  switch (type) {
    case DType::kQ4_0:
      return {sizeof(BlockQ4_0), 0, -1, 2, true, nullptr};
    case DType::kQ5_0:
      return {sizeof(BlockQ5_0), 0, 2, 6, true, nullptr};
    case DType::kQ5_1:
      return {sizeof(BlockQ5_1), 0, 4, 8, true, nullptr};
    case DType::kIQ4_NL:
      return {sizeof(BlockIQ4_NL), 0, -1, 2, true, kIQ4NLValues};
    case DType::kMXFP4:
      return {sizeof(BlockMXFP4), -1, -1, 1, true, kMXFP4Values};
    default:
      return {sizeof(BlockQ8_0), 0, -1, 2, false, nullptr};
  }
}

#endif  // TG_CPU_SIMD

}  // namespace

bool QGemmSupports(DType type) {
#if defined(TG_CPU_AVX512)
  return type == DType::kQ8_0 || type == DType::kQ4_0 || type == DType::kQ5_0 ||
         type == DType::kQ5_1 || type == DType::kIQ4_NL || type == DType::kMXFP4 ||
         type == DType::kQ4_K || type == DType::kIQ4_XS;
#elif defined(TG_CPU_SIMD)  // AVX2: Q4_0's decode tiles are faster for prompts too.
  return type == DType::kQ8_0 || type == DType::kQ5_0 || type == DType::kQ5_1 ||
         type == DType::kIQ4_NL || type == DType::kMXFP4 || type == DType::kQ4_K ||
         type == DType::kIQ4_XS;
#else
  (void)type;
  return false;
#endif
}

size_t QGemmActRowBytes(int64_t k) { return static_cast<size_t>(k / kQK8_0) * sizeof(ActBlock); }

void QGemmActFromF32(DType type, const float* x, void* y, int64_t k) {
  ActBlock* out = static_cast<ActBlock*>(y);
  constexpr int kSubBlocks = kQK_K / kQK8_0;
  if (type == DType::kQ4_K || type == DType::kIQ4_XS) {
    // Q8_K's rounding (their decode tiles'): one scale per 256 for its 8 blocks.
    for (int64_t sb = 0; sb < k / kQK_K; ++sb) {
      int8_t q[kQK_K];
      const float d = QuantizeBlockQ8_K(x + sb * kQK_K, q);
      for (int s = 0; s < kSubBlocks; ++s) {
        ActBlock& b = out[sb * kSubBlocks + s];
        std::memcpy(b.qs, q + s * kQK8_0, kQK8_0);
        b.d = d;
      }
    }
  } else {
    for (int64_t i = 0; i < k / kQK8_0; ++i) {
      out[i].d = QuantizeBlockQ8_0(x + i * kQK8_0, out[i].qs);
    }
  }
  const int offset = WeightOffset(type);
  for (int64_t i = 0; i < k / kQK8_0; ++i) {
#if defined(TG_CPU_SIMD)
    const int sum = simd::SumI8(out[i].qs, kQK8_0);
#else
    int sum = 0;
    for (int j = 0; j < kQK8_0; ++j) sum += out[i].qs[j];
#endif
    out[i].corr = -offset * sum;
    out[i].ds = out[i].d * static_cast<float>(sum);
  }
}

size_t QGemmPackBytes(int64_t k) { return static_cast<size_t>(k / kQK8_0) * sizeof(PackedBlock); }

#if defined(TG_CPU_SIMD)
namespace {

// Super-block rows (Q4_K, IQ4_XS) as packed blocks of 32. Q4_K's sub-block s has its quants in
// the low (s even) or high nibbles of the super-block's 32-byte chunk s / 2; IQ4_XS's are 16
// bytes of nibbles each, as IQ4_NL's, looked up in its levels plus the type's offset.
void PackSuperBlocks(DType type, int64_t k, const char* a, size_t a_stride, int rows,
                     PackedBlock* out) {
  constexpr int kSubBlocks = kQK_K / kQK8_0;
  const size_t block_bytes = type == DType::kQ4_K ? sizeof(BlockQ4_K) : sizeof(BlockIQ4_XS);
  const int offset = WeightOffset(type);
  for (int64_t sb = 0; sb < k / kQK_K; ++sb) {
    PackedBlock* blocks = out + sb * kSubBlocks;
    if (rows < kQGemmRows) std::memset(blocks, 0, kSubBlocks * sizeof(PackedBlock));
    for (int r = 0; r < rows; ++r) {
      const char* x = a + r * a_stride + sb * block_bytes;
      // Each sub-block's quants as bytes (v[s]), its scale and (Q4_K) its minimum.
      alignas(32) uint8_t v[kSubBlocks][kQK8_0];
      float d[kSubBlocks], m[kSubBlocks] = {};
      if (type == DType::kQ4_K) {
        const BlockQ4_K& q4 = *reinterpret_cast<const BlockQ4_K*>(x);
        uint64_t scales, mins;
        simd::UnpackScalesK4(q4.scales, &scales, &mins);
        const float dq = HalfToFloat(q4.d), dmin = HalfToFloat(q4.dmin);
        for (int s = 0; s < kSubBlocks; ++s) {
          d[s] = dq * static_cast<float>((scales >> (8 * s)) & 0xFF);
          m[s] = -dmin * static_cast<float>((mins >> (8 * s)) & 0xFF);
          const uint8_t* q = q4.qs + 32 * (s / 2);
          for (int i = 0; i < kQK8_0; ++i) v[s][i] = s % 2 == 0 ? q[i] & 0x0F : q[i] >> 4;
        }
      } else {
        const BlockIQ4_XS& xs = *reinterpret_cast<const BlockIQ4_XS*>(x);
        const float dx = HalfToFloat(xs.d);
        for (int s = 0; s < kSubBlocks; ++s) {
          d[s] = dx * static_cast<float>(IQ4XSScale(xs, s));
          const uint8_t* q = xs.qs + 16 * s;
          for (int i = 0; i < kQK8_0 / 2; ++i) {
            v[s][i] = static_cast<uint8_t>(kIQ4NLValues[q[i] & 0x0F] + offset);
            v[s][i + kQK8_0 / 2] = static_cast<uint8_t>(kIQ4NLValues[q[i] >> 4] + offset);
          }
        }
      }
      for (int s = 0; s < kSubBlocks; ++s) {
        blocks[s].d[r] = d[s];
        blocks[s].m[r] = m[s];
        for (int g = 0; g < kGroups; ++g) std::memcpy(&blocks[s].q[g][4 * r], v[s] + 4 * g, 4);
      }
    }
  }
}

}  // namespace
#endif  // TG_CPU_SIMD

#if defined(TG_CPU_AVX512)
namespace {

// 2^(e - 128) for 16 E8M0 bytes (E8M0ToFloatHalf, vectorized).
__m512 E8M0HalfScales(__m512i e) {
  const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __mmask16 is_small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_small, normal, small));
}

// Bits 4 g .. 4 g + 3 of each lane's 32-bit mask as bit 4 of the lane's 4 bytes.
__m512i FifthBits(__m512i qh, int g) {
  constexpr int32_t kSpread = 0x00204081;  // bit i -> bit 8 i + i.
  const __m512i nib = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * g), _mm512_set1_epi32(0xF));
  const __m512i spread = _mm512_and_si512(_mm512_mullo_epi32(nib, _mm512_set1_epi32(kSpread)),
                                          _mm512_set1_epi32(0x01010101));
  return _mm512_slli_epi32(spread, 4);
}

}  // namespace

// Gathers put the 16 rows across the lanes directly: one 4-byte gather per group of quants
// (two groups per gather for nibbles), one for the scales and one for Q5's fifth bits.
void QGemmPack(DType type, int64_t k, const char* a, size_t a_stride, int rows, void* pack) {
  const int64_t nblocks = k / kQK8_0;
  PackedBlock* out = static_cast<PackedBlock*>(pack);
  if (type == DType::kQ4_K || type == DType::kIQ4_XS) {
    return PackSuperBlocks(type, k, a, a_stride, rows, out);
  }
  const __mmask16 m = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(a_stride)));
  const __m512i zero = _mm512_setzero_si512();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const PackLayout lay = LayoutOf(type);
  const int offset = WeightOffset(type);
  __m512i table = zero;
  if (lay.levels != nullptr) {
    alignas(16) int8_t t[16];
    for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(lay.levels[i] + offset);
    table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
  }
  for (int64_t b = 0; b < nblocks; ++b) {
    const char* base = a + b * lay.block_bytes;
    const __m512i head = _mm512_mask_i32gather_epi32(zero, m, row_offsets, base, 1);
    if (lay.scale_at < 0) {
      _mm512_store_ps(out[b].d, E8M0HalfScales(_mm512_and_si512(head, _mm512_set1_epi32(0xFF))));
    } else {
      _mm512_store_ps(out[b].d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head)));
      // Q5_1's minimum is the second half of the same 32 bits.
      _mm512_store_ps(out[b].m,
                      _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16))));
    }
    if (!lay.nibbles) {
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      for (int g = 0; g < kGroups; ++g) {
        const __m512i v =
            _mm512_mask_i32gather_epi32(zero, m, row_offsets, base + lay.quants_at + 4 * g, 1);
        _mm512_store_si512(out[b].q[g], _mm512_xor_si512(v, flip));
      }
      continue;
    }
    const __m512i qh =
        lay.high_at < 0 ? zero
                        : _mm512_mask_i32gather_epi32(zero, m, row_offsets, base + lay.high_at, 1);
    for (int g = 0; g < kGroups / 2; ++g) {
      const __m512i v =
          _mm512_mask_i32gather_epi32(zero, m, row_offsets, base + lay.quants_at + 4 * g, 1);
      __m512i lo = _mm512_and_si512(v, low4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      if (lay.levels != nullptr) {
        lo = _mm512_shuffle_epi8(table, lo);
        hi = _mm512_shuffle_epi8(table, hi);
      }
      if (lay.high_at >= 0) {
        lo = _mm512_or_si512(lo, FifthBits(qh, g));
        hi = _mm512_or_si512(hi, FifthBits(qh, g + kGroups / 2));
      }
      _mm512_store_si512(out[b].q[g], lo);
      _mm512_store_si512(out[b].q[g + kGroups / 2], hi);
    }
  }
}
#elif defined(TG_CPU_SIMD)
// Row by row, in plain code: a tile is packed once per column block and serves hundreds of
// activation columns.
void QGemmPack(DType type, int64_t k, const char* a, size_t a_stride, int rows, void* pack) {
  const int64_t nblocks = k / kQK8_0;
  PackedBlock* out = static_cast<PackedBlock*>(pack);
  if (type == DType::kQ4_K || type == DType::kIQ4_XS) {
    return PackSuperBlocks(type, k, a, a_stride, rows, out);
  }
  const PackLayout lay = LayoutOf(type);
  const int offset = WeightOffset(type);
  for (int64_t b = 0; b < nblocks; ++b) {
    if (rows < kQGemmRows) std::memset(&out[b], 0, sizeof(PackedBlock));  // scale 0, quants 0.
    for (int r = 0; r < rows; ++r) {
      const uint8_t* x = reinterpret_cast<const uint8_t*>(a + r * a_stride + b * lay.block_bytes);
      if (lay.scale_at < 0) {
        out[b].d[r] = E8M0ToFloatHalf(x[0]);
      } else {
        uint16_t h[2];
        std::memcpy(h, x + lay.scale_at, sizeof(h));
        out[b].d[r] = HalfToFloat(h[0]);
        out[b].m[r] = HalfToFloat(h[1]);  // Q5_1's minimum; the next field's bytes otherwise.
      }
      // The 32 unsigned bytes in element order (a raw nibble with its fifth bit is the value
      // plus the offset already), then 4 at a time into the row's place in each group.
      alignas(32) uint8_t v[kQK8_0];
      const uint8_t* q = x + lay.quants_at;
      if (!lay.nibbles) {
        for (int i = 0; i < kQK8_0; ++i) v[i] = static_cast<uint8_t>(q[i] + offset);
      } else {
        for (int i = 0; i < kQK8_0 / 2; ++i) {
          v[i] = q[i] & 0x0F;
          v[i + kQK8_0 / 2] = q[i] >> 4;
        }
        if (lay.levels != nullptr) {
          for (int i = 0; i < kQK8_0; ++i) v[i] = static_cast<uint8_t>(lay.levels[v[i]] + offset);
        }
        if (lay.high_at >= 0) {
          uint32_t qh;
          std::memcpy(&qh, x + lay.high_at, sizeof(qh));
          for (int i = 0; i < kQK8_0; ++i) v[i] |= static_cast<uint8_t>(((qh >> i) & 1) << 4);
        }
      }
      for (int g = 0; g < kGroups; ++g) std::memcpy(&out[b].q[g][4 * r], v + 4 * g, 4);
    }
  }
}
#else
void QGemmPack(DType, int64_t, const char*, size_t, int, void*) {}
#endif

#if defined(TG_CPU_AVX512)
namespace {

template <int C, bool kMin>
void Tile(int64_t nblocks, const PackedBlock* w, const ActBlock* const* y, __m512* acc) {
  for (int j = 0; j < C; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b) {
    __m512i q[kGroups];
    for (int g = 0; g < kGroups; ++g) q[g] = _mm512_load_si512(w[b].q[g]);
    const __m512 dx = _mm512_load_ps(w[b].d);
    for (int j = 0; j < C; ++j) {
      const ActBlock& yb = y[j][b];
      const int32_t* yq = reinterpret_cast<const int32_t*>(yb.qs);
      // Two chains of 4 shorten the dependency on the VPDPBUSD latency.
      __m512i s0 = _mm512_set1_epi32(yb.corr), s1 = _mm512_setzero_si512();
      for (int g = 0; g < kGroups; g += 2) {
        int32_t v0, v1;
        std::memcpy(&v0, yq + g, 4);
        std::memcpy(&v1, yq + g + 1, 4);
        s0 = _mm512_dpbusd_epi32(s0, q[g], _mm512_set1_epi32(v0));
        s1 = _mm512_dpbusd_epi32(s1, q[g + 1], _mm512_set1_epi32(v1));
      }
      const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
      acc[j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dx, _mm512_set1_ps(yb.d)), acc[j]);
      if (kMin) acc[j] = _mm512_fmadd_ps(_mm512_load_ps(w[b].m), _mm512_set1_ps(yb.ds), acc[j]);
    }
  }
}

// Tiles<kMin, std::integer_sequence<int, kC...>>::kFns[C - 1] is Tile<C, kMin>.
template <bool kMin, typename Seq>
struct Tiles;
template <bool kMin, int... kC>
struct Tiles<kMin, std::integer_sequence<int, kC...>> {
  using Fn = void (*)(int64_t, const PackedBlock*, const ActBlock* const*, __m512*);
  static constexpr Fn kFns[] = {Tile<kC + 1, kMin>...};
};

// Tile<cols, kMin>: one pass over all the columns (1 to kQGemmCols).
template <bool kMin>
void RunTile(int64_t nblocks, const PackedBlock* w, const ActBlock* const* y, int cols,
             __m512* acc) {
  using AllTiles = Tiles<kMin, std::make_integer_sequence<int, kQGemmCols>>;
  AllTiles::kFns[(cols >= 1 && cols < kQGemmCols ? cols : kQGemmCols) - 1](nblocks, w, y, acc);
}

// QGemmTile's work, on the packed tile and the activation rows.
void IsaTile(DType type, int64_t nblocks, const PackedBlock* w, const ActBlock* const* y, int rows,
             int cols, float* const* c) {
  __m512 acc[kQGemmCols];
  if (type == DType::kQ5_1 || type == DType::kQ4_K) {
    RunTile<true>(nblocks, w, y, cols, acc);
  } else {
    RunTile<false>(nblocks, w, y, cols, acc);
  }
  const __mmask16 m = static_cast<__mmask16>((1u << rows) - 1);
  for (int j = 0; j < cols; ++j) _mm512_mask_storeu_ps(c[j], m, acc[j]);
}

}  // namespace
#elif defined(TG_CPU_SIMD)
namespace {

// acc[2 j + h] holds rows 8 h .. 8 h + 7 of column j. kSpan groups' VPMADDUBSW pair sums are
// added in 16 bits before one VPMADDWD widens them (IsaTile says why they fit).
template <int C, bool kMin, bool kSigned, int kSpan>
void Tile(int64_t nblocks, const PackedBlock* w, const ActBlock* const* y, __m256* acc) {
  static_assert(kGroups % kSpan == 0);
  for (int j = 0; j < 2 * C; ++j) acc[j] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nblocks; ++b) {
    const __m256 dx[2] = {_mm256_load_ps(w[b].d), _mm256_load_ps(w[b].d + 8)};
    for (int j = 0; j < C; ++j) {
      const ActBlock& yb = y[j][b];
      __m256i s[2] = {_mm256_set1_epi32(yb.corr), _mm256_set1_epi32(yb.corr)};
      for (int g0 = 0; g0 < kGroups; g0 += kSpan) {
        __m256i p[2];
        for (int g = g0; g < g0 + kSpan; ++g) {
          int32_t v;
          std::memcpy(&v, yb.qs + 4 * g, 4);
          const __m256i a4 = _mm256_set1_epi32(v);
          for (int h = 0; h < 2; ++h) {
            const __m256i q =
                _mm256_load_si256(reinterpret_cast<const __m256i*>(w[b].q[g] + 32 * h));
            const __m256i pg =
                kSigned ? _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a4, q))
                        : _mm256_maddubs_epi16(q, a4);
            p[h] = g == g0 ? pg : _mm256_add_epi16(p[h], pg);
          }
        }
        for (int h = 0; h < 2; ++h) s[h] = _mm256_add_epi32(s[h], _mm256_madd_epi16(p[h], ones));
      }
      const __m256 dy = _mm256_set1_ps(yb.d);
      for (int h = 0; h < 2; ++h) {
        acc[2 * j + h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h]), _mm256_mul_ps(dx[h], dy), acc[2 * j + h]);
        if (kMin) {
          acc[2 * j + h] = _mm256_fmadd_ps(_mm256_load_ps(w[b].m + 8 * h), _mm256_set1_ps(yb.ds),
                                           acc[2 * j + h]);
        }
      }
    }
  }
}

// Four columns at a time: 8 accumulators stay in registers beside the loads.
template <bool kMin, bool kSigned, int kSpan>
void RunTile(int64_t nblocks, const PackedBlock* w, const ActBlock* const* y, int cols,
             __m256* acc) {
  simd::ByColumnPasses<4>(cols, [&](auto n, int j) {
    Tile<decltype(n)::value, kMin, kSigned, kSpan>(nblocks, w, y + j, acc + 2 * j);
  });
}

// QGemmTile's work, on the packed tile and the activation rows.
void IsaTile(DType type, int64_t nblocks, const PackedBlock* w, const ActBlock* const* y, int rows,
             int cols, float* const* c) {
  // A pair sum is at most 2 * 127 * the largest packed weight (activations stay within
  // +-127), and kSpan of them below 2^15: Q4_K (15) all 8 groups, Q5_0 / Q5_1 (31) and MXFP4
  // (24) 4, the signed Q8_0 / IQ4_NL / IQ4_XS (127) one.
  __m256 acc[2 * kQGemmCols];
  if (type == DType::kQ8_0 || type == DType::kIQ4_NL ||
      type == DType::kIQ4_XS) {  // packed signed (WeightOffset 0).
    RunTile<false, true, 1>(nblocks, w, y, cols, acc);
  } else if (type == DType::kQ5_1) {
    RunTile<true, false, 4>(nblocks, w, y, cols, acc);
  } else if (type == DType::kQ4_K) {
    RunTile<true, false, kGroups>(nblocks, w, y, cols, acc);
  } else {  // Q5_0, MXFP4.
    RunTile<false, false, 4>(nblocks, w, y, cols, acc);
  }
  for (int j = 0; j < cols; ++j) {
    alignas(32) float out[kQGemmRows];
    _mm256_store_ps(out, acc[2 * j]);
    _mm256_store_ps(out + 8, acc[2 * j + 1]);
    std::memcpy(c[j], out, rows * sizeof(float));
  }
}

}  // namespace
#else
namespace {
void IsaTile(DType, int64_t, const PackedBlock*, const ActBlock* const*, int, int, float* const*) {}
}  // namespace
#endif

void QGemmTile(DType type, int64_t k, const void* pack, int rows, const void* const* b, int cols,
               float* const* c) {
  const ActBlock* y[kQGemmCols];
  for (int j = 0; j < cols; ++j) y[j] = static_cast<const ActBlock*>(b[j]);
  IsaTile(type, k / kQK8_0, static_cast<const PackedBlock*>(pack), y, rows, cols, c);
}

}  // namespace tg::cpu
