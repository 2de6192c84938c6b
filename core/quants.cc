#include "core/quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"

// ggml's reference quantizers are built without FMA. Letting the compiler fuse a*b+c into one
// instruction (GCC does so by default in C++ with -march=native) rounds once instead of twice,
// which changes scale searches and breaks bit-exactness with ggml. Forbid it for this file.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace tg {
namespace {

// Below this magnitude a group counts as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, by adding 1.5 * 2^23 so that the integer lands in the low
// mantissa bits. Valid for |v| <= 2^22 - 1; ggml uses exactly this trick (nearest_int), and
// matching it also matches its (unchecked) behaviour outside that range.
int NearestInt(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007fffff) - 0x00400000;
}

// float -> int8 as ggml's `(int8_t)f` compiles on x86: cvttss2si truncates toward zero and
// yields INT32_MIN for NaN or out-of-range input, then the low byte is kept. Spelled out so
// that denormal inputs (whose inverse scale overflows to inf) give ggml's bytes without UB.
int8_t TruncToInt8(float v) {
  constexpr float kTwo31 = 2147483648.f;
  const int32_t wide = (v > -kTwo31 && v < kTwo31) ? static_cast<int32_t>(v) : INT32_MIN;
  return static_cast<int8_t>(wide);  // modular in C++20.
}

// ---------------------------------------------------------------------------------------------
// Q4_0 / Q8_0

// The value of largest magnitude, the first one on ties (ggml's Q4_0 / Q5_0 scale source).
float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void QuantizeBlockQ4_0(const float* x, BlockQ4_0* y) {
  // The signed value of largest magnitude (first one on ties) maps to -8, so d may be negative.
  const float d = SignedAbsMax(x, kQK4_0) / -8;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = FloatToHalf(d);
  constexpr int kHalf = kQK4_0 / 2;
  for (int j = 0; j < kHalf; ++j) {
    // Truncating x + 8.5 rounds half up; +amax of the opposite sign would give 16, hence min.
    const int lo = std::min(15, static_cast<int>(TruncToInt8(x[j] * id + 8.5f)));
    const int hi = std::min(15, static_cast<int>(TruncToInt8(x[j + kHalf] * id + 8.5f)));
    y->qs[j] = static_cast<uint8_t>(static_cast<uint8_t>(lo) | (static_cast<uint8_t>(hi) << 4));
  }
}

void QuantizeBlockQ8_0(const float* x, BlockQ8_0* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = FloatToHalf(d);
  for (int j = 0; j < kQK8_0; ++j) y->qs[j] = TruncToInt8(std::round(x[j] * id));
}

// Q5_0 / Q5_1: Q4_0 / Q4_1 with a fifth bit per quant, kept in a 32-bit word.

constexpr int kQ5Half = kQK5_0 / 2;
constexpr uint32_t kQ5HighBit = 0x10;

// Splits 32 five-bit quants (element j, element j + 16 per byte) into nibbles and qh.
void PackQ5(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < kQ5Half; ++j) {
    const uint8_t lo = q[j], hi = q[j + kQ5Half];
    qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    qh |= ((lo & kQ5HighBit) >> 4) << j;
    qh |= ((hi & kQ5HighBit) >> 4) << (j + kQ5Half);
  }
  std::memcpy(qh_bytes, &qh, sizeof(qh));
}

// PackQ5's inverse: the 32 five-bit quants (0..31) of a block, in element order.
void UnpackQ5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  for (int j = 0; j < kQ5Half; ++j) {
    q[j] = (qs[j] & 0x0F) | (((qh >> j) << 4) & kQ5HighBit);
    q[j + kQ5Half] = (qs[j] >> 4) | ((qh >> (j + 12)) & kQ5HighBit);
  }
}

void QuantizeBlockQ5_0(const float* x, BlockQ5_0* y) {
  // As Q4_0: the signed extreme maps to -16 (quant 0), so d may be negative.
  const float d = SignedAbsMax(x, kQK5_0) / -16;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = FloatToHalf(d);
  uint8_t q[kQK5_0];
  for (int j = 0; j < kQK5_0; ++j) {
    q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(TruncToInt8(x[j] * id + 16.5f))));
  }
  PackQ5(q, y->qs, y->qh);
}

void QuantizeBlockQ5_1(const float* x, BlockQ5_1* y) {
  float min = std::numeric_limits<float>::max();
  float max = -std::numeric_limits<float>::max();
  for (int j = 0; j < kQK5_1; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / 31;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = FloatToHalf(d);
  y->m = FloatToHalf(min);
  uint8_t q[kQK5_1];
  // ggml truncates (x - min) / d + 0.5 straight to uint8_t: no clamp, as (x - min) / d <= 31.
  for (int j = 0; j < kQK5_1; ++j)
    q[j] = static_cast<uint8_t>(TruncToInt8((x[j] - min) * id + 0.5f));
  PackQ5(q, y->qs, y->qh);
}

// ---------------------------------------------------------------------------------------------
// MXFP4 and IQ4_NL: a table of 16 levels times one scale per 32.

constexpr int kNibbleHalf = 16;  // qs[j] holds element j (low nibble) and j + 16 (high).
constexpr int kLevels = 16;

void PackNibbles(const uint8_t* l, uint8_t* qs) {
  for (int j = 0; j < kNibbleHalf; ++j) {
    qs[j] = static_cast<uint8_t>(l[j] | (l[j + kNibbleHalf] << 4));
  }
}

// The E2M1 level closest to x at scale e (the first on ties), as ggml's best_index_mxfp4.
uint8_t NearestMXFP4(float x, float e) {
  int best = 0;
  float best_err = std::fabs(kMXFP4Values[0] * e - x);
  for (int i = 1; i < kLevels; ++i) {
    const float err = std::fabs(kMXFP4Values[i] * e - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

// E2M1's largest magnitude is 6 = 1.5 * 2^2: the exponent puts amax in [4, 8) * 2^(e - 127).
constexpr float kMXFP4ExponentShift = 2;
constexpr float kE8M0Bias = 127;

void QuantizeBlockMXFP4(const float* x, BlockMXFP4* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQKMXFP4; ++j) {
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
  }
  const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(TruncToInt8(std::floor(std::log2(amax)) -
                                                                   kMXFP4ExponentShift + kE8M0Bias))
                                : 0;
  const float d = E8M0ToFloatHalf(e);
  y->e = e;
  uint8_t l[kQKMXFP4];
  for (int j = 0; j < kQKMXFP4; ++j) l[j] = NearestMXFP4(x[j], d);
  PackNibbles(l, y->qs);
}

// Index of the IQ4_NL level nearest to x (upper one on ties), as ggml's best_index_int8: a
// branch-free binary search on the midpoints, compared at twice the scale so they are exact.
int NearestIQ4NL(float x) {
  const float x2 = x + x;
  int idx = 0;
  for (int step = kLevels / 2; step > 0; step /= 2) {
    const int j = idx + step;
    idx = x2 >= static_cast<float>(kIQ4NLValues[j - 1] + kIQ4NLValues[j]) ? j : idx;
  }
  return idx;
}

// Weighted least-squares fit of x ~ d * level for the levels chosen at inverse scale id.
struct LevelFit {
  float sumqx = 0;
  float sumq2 = 0;
};

LevelFit FitIQ4NL(const float* x, const float* weight, float id, uint8_t* l) {
  LevelFit f;
  for (int j = 0; j < kQK4_NL; ++j) {
    const int idx = NearestIQ4NL(id * x[j]);
    if (l != nullptr) l[j] = static_cast<uint8_t>(idx);
    const float q = kIQ4NLValues[idx];
    const float w = weight[j];
    f.sumqx += w * q * x[j];
    f.sumq2 += w * q * q;
  }
  return f;
}

// ggml's quantize_row_iq4_nl_impl for one block of 32 without importance weights: the scale
// that maps the signed extreme to the outer level, refitted by least squares; with ntry > 0
// also the inverse scales (values[0] + t) / max for t = -ntry..ntry. Returns the scale (0 for
// an all-zero block) and the levels of the first fit in l.
float FitIQ4NLBlock(const float* x, int ntry, uint8_t* l) {
  float weight[kQK4_NL];
  float amax = 0, max = 0;
  for (int j = 0; j < kQK4_NL; ++j) {
    weight[j] = x[j] * x[j];
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(l, l + kQK4_NL, 0);
    return 0.0f;
  }
  const float d0 = ntry > 0 ? -max / kIQ4NLValues[0] : max / kIQ4NLValues[0];
  LevelFit f = FitIQ4NL(x, weight, 1 / d0, l);
  float d = f.sumq2 > 0 ? f.sumqx / f.sumq2 : 0.f;
  float best = d * f.sumqx;
  for (int t = -ntry; t <= ntry; ++t) {
    f = FitIQ4NL(x, weight, (t + kIQ4NLValues[0]) / max, nullptr);
    if (f.sumq2 > 0 && f.sumqx * f.sumqx > best * f.sumq2) {
      d = f.sumqx / f.sumq2;
      best = d * f.sumqx;
    }
  }
  return d;
}

// quantize_row_iq4_nl_ref makes no scale search (ntry < 0: the first least-squares fit from
// max / values[0]) and keeps that fit's levels.
constexpr int kIQ4NLRefTries = -1;

void QuantizeBlockIQ4_NL(const float* x, BlockIQ4_NL* y) {
  uint8_t l[kQK4_NL];
  y->d = FloatToHalf(FitIQ4NLBlock(x, kIQ4NLRefTries, l));
  PackNibbles(l, y->qs);
}

// ---------------------------------------------------------------------------------------------
// Q4_K: 8 sub-blocks of 32 with a 4-bit quant, a 6-bit scale and a 6-bit min each.

constexpr int kQ4KSub = 32;                  // elements per sub-block.
constexpr int kQ4KNumSub = kQK_K / kQ4KSub;  // 8 sub-blocks.
constexpr int kQ4KMaxQ = 15;

// Search grid of make_qkx2_quants: inverse scales (nmax + rmin + rdelta * i) / (max - min) for
// i = 0..steps, and whether the error is absolute (Q2_K) or squared.
struct Qkx2Grid {
  float rmin;
  float rdelta;
  int steps;
  bool use_mad;
};
constexpr Qkx2Grid kQ4KGrid{-1.0f, 0.1f, 20, false};
constexpr Qkx2Grid kQ5KGrid{-0.5f, 0.1f, 15, false};
constexpr Qkx2Grid kQ2KGrid{-0.5f, 0.1f, 15, true};
constexpr int kQkx2MaxN = 32;  // longest group make_qkx2_quants is called on.

// Weighted sums over a sub-block for the least-squares fit of x ~ scale * l + min.
struct Qkx2Sums {
  float sum_l = 0;
  float sum_l2 = 0;
  float sum_xl = 0;
};

// Quantizes x - min with inverse scale `iscale` into l in [0, nmax] and accumulates sums.
Qkx2Sums QuantizeAffine(int n, int nmax, const float* x, const float* weights, float iscale,
                        float min, uint8_t* l_out) {
  Qkx2Sums s;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
    l_out[i] = static_cast<uint8_t>(l);
    const float w = weights[i];
    s.sum_l += w * l;
    s.sum_l2 += w * l * l;
    s.sum_xl += w * l * x[i];
  }
  return s;
}

// Weighted error (squared, or absolute with use_mad) of reconstructing x as scale * l + min.
float AffineError(int n, const float* x, const float* weights, const uint8_t* l, float scale,
                  float min, bool use_mad) {
  float error = 0;
  for (int i = 0; i < n; ++i) {
    float diff = scale * l[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    error += weights[i] * diff;
  }
  return error;
}

// ggml's make_qkx2_quants: fits x ~ scale * l + min with min <= 0 by trying a grid of
// inverse scales around nmax / (max - min) and keeping the best weighted least-squares fit.
// Returns the scale; *neg_min receives -min (>= 0).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, const Qkx2Grid& grid,
                     uint8_t* l, float* neg_min) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;  // the offset only ever shifts down.
  if (max == min) {
    std::fill(l, l + n, 0);
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  QuantizeAffine(n, nmax, x, weights, iscale, min, l);
  float best_error = AffineError(n, x, weights, l, scale, min, grid.use_mad);
  uint8_t candidate[kQkx2MaxN];
  for (int is = 0; is <= grid.steps; ++is) {
    iscale = (grid.rmin + grid.rdelta * is + nmax) / (max - min);
    const Qkx2Sums s = QuantizeAffine(n, nmax, x, weights, iscale, min, candidate);
    const float det = sum_w * s.sum_l2 - s.sum_l * s.sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * s.sum_xl - sum_x * s.sum_l) / det;
    float this_min = (s.sum_l2 * sum_x - s.sum_l * s.sum_xl) / det;
    if (this_min > 0) {  // a positive offset is not representable: refit the scale alone.
      this_min = 0;
      this_scale = s.sum_xl / s.sum_l2;
    }
    const float error = AffineError(n, x, weights, candidate, this_scale, this_min, grid.use_mad);
    if (error < best_error) {
      std::copy(candidate, candidate + n, l);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// Scale and min of sub-block j from the 12 packed bytes: sub-blocks 0-3 keep their 6 bits in
// bytes 0-7; sub-blocks 4-7 keep their low 4 bits in bytes 8-11 and their top 2 bits in the
// spare top bits of bytes 0-7.
void UnpackScaleMinK4(int j, const uint8_t* packed, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// The scales and mins of sub-blocks 2c and 2c + 1 of a Q4_K or Q5_K block (the two halves of
// its c-th 32 bytes of quants), times the block's d and dmin.
struct SubBlockPair {
  float d1, m1, d2, m2;
};
SubBlockPair SubBlockPairK4(const uint8_t* packed, int c, float d, float dmin) {
  uint8_t sc1, m1, sc2, m2;
  UnpackScaleMinK4(2 * c, packed, &sc1, &m1);
  UnpackScaleMinK4(2 * c + 1, packed, &sc2, &m2);
  return {d * sc1, dmin * m1, d * sc2, dmin * m2};
}

void PackScaleMinK4(int j, uint8_t scale, uint8_t min, uint8_t* packed) {
  if (j < 4) {
    packed[j] = scale;
    packed[j + 4] = min;
  } else {  // runs after j - 4, so bytes j - 4 and j already hold sub-block j - 4.
    packed[j + 4] = static_cast<uint8_t>((scale & 0xF) | ((min & 0xF) << 4));
    packed[j - 4] |= static_cast<uint8_t>((scale >> 4) << 6);
    packed[j] |= static_cast<uint8_t>((min >> 4) << 6);
  }
}

// Quantizes a float in [0, 63] to 6 bits the way ggml does: through uint8_t, then capped.
uint8_t SixBits(float v) { return std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(v))); }

// First pass: per-sub-block scale/min with quants l, weighting by RMS + |x| as ggml does.
void FitScaleMinSubBlocks(const float* x, int nmax, const Qkx2Grid& grid, uint8_t* l, float* scales,
                          float* mins) {
  float weights[kQ4KSub];
  for (int j = 0; j < kQ4KNumSub; ++j) {
    const float* xs = x + kQ4KSub * j;
    float sum_x2 = 0;
    for (int i = 0; i < kQ4KSub; ++i) sum_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sum_x2 / kQ4KSub);
    for (int i = 0; i < kQ4KSub; ++i) weights[i] = av_x + std::fabs(xs[i]);
    scales[j] = MakeQkx2Quants(kQ4KSub, nmax, xs, weights, grid, l + kQ4KSub * j, &mins[j]);
  }
}

// The part Q4_K and Q5_K share: 8 sub-blocks of 32 with 6-bit scales and mins under f16
// super-scales. Writes d, dmin and the packed scales, and the quants l (0..nmax) to store.
void QuantizeScaleMinK(const float* x, int nmax, const Qkx2Grid& grid, uint8_t* l, uint16_t* d_out,
                       uint16_t* dmin_out, uint8_t* packed) {
  float scales[kQ4KNumSub];
  float mins[kQ4KNumSub];
  FitScaleMinSubBlocks(x, nmax, grid, l, scales, mins);
  float max_scale = 0;  // scales are positive since the min was subtracted.
  float max_min = 0;
  for (int j = 0; j < kQ4KNumSub; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQ4KNumSub; ++j) {
    PackScaleMinK4(j, SixBits(inv_scale * scales[j]), SixBits(inv_min * mins[j]), packed);
  }
  *d_out = FloatToHalf(max_scale / 63.f);
  *dmin_out = FloatToHalf(max_min / 63.f);
  // Requantize against the scales as stored; sub-blocks whose scale became 0 keep the quants
  // of the first pass (they dequantize to -min regardless).
  for (int j = 0; j < kQ4KNumSub; ++j) {
    uint8_t sc, m;
    UnpackScaleMinK4(j, packed, &sc, &m);
    const float d = HalfToFloat(*d_out) * sc;
    if (d == 0.0f) continue;
    const float dm = HalfToFloat(*dmin_out) * m;
    for (int i = 0; i < kQ4KSub; ++i) {
      const int q = NearestInt((x[kQ4KSub * j + i] + dm) / d);
      l[kQ4KSub * j + i] = static_cast<uint8_t>(std::clamp(q, 0, nmax));
    }
  }
}

void QuantizeBlockQ4_K(const float* x, BlockQ4_K* y) {
  uint8_t l[kQK_K];
  QuantizeScaleMinK(x, kQ4KMaxQ, kQ4KGrid, l, &y->d, &y->dmin, y->scales);
  // Each 32-byte chunk of qs holds two sub-blocks: low nibbles the first, high the second.
  for (int c = 0; c < kQK_K / 64; ++c) {
    const uint8_t* lc = l + 64 * c;
    for (int i = 0; i < 32; ++i)
      y->qs[32 * c + i] = static_cast<uint8_t>(lc[i] | (lc[i + 32] << 4));
  }
}

// ---------------------------------------------------------------------------------------------
// Q5_K: Q4_K with a fifth bit per quant.

constexpr int kQ5KMaxQ = 31;
constexpr int kFifthBit = 16;

void QuantizeBlockQ5_K(const float* x, BlockQ5_K* y) {
  uint8_t l[kQK_K];
  QuantizeScaleMinK(x, kQ5KMaxQ, kQ5KGrid, l, &y->d, &y->dmin, y->scales);
  // Chunk c (64 elements) puts its low nibbles as Q4_K does and its fifth bits at bits 2c
  // (first sub-block) and 2c + 1 (second) of qh[i].
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int c = 0; c < kQK_K / 64; ++c) {
    const uint8_t* lc = l + 64 * c;
    for (int i = 0; i < 32; ++i) {
      const int lo = lc[i], hi = lc[i + 32];
      y->qh[i] |=
          static_cast<uint8_t>(((lo >= kFifthBit) << (2 * c)) | ((hi >= kFifthBit) << (2 * c + 1)));
      y->qs[32 * c + i] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q6_K: 16 groups of 16 with a 6-bit quant and an 8-bit signed scale each.

constexpr int kQ6KGroup = 16;
constexpr int kQ6KNumGroups = kQK_K / kQ6KGroup;
constexpr int kQ6KHalfRange = 32;  // quants are -32..31, stored with +32.

// Symmetric quantization l in [-nmax, nmax-1] with inverse scale `iscale`, weighted by x^2;
// returns the sums for the least-squares scale sum(w x l) / sum(w l^2).
void SymmetricFit(int n, int nmax, const float* x, float iscale, float* sumlx, float* suml2) {
  *sumlx = 0;
  *suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    const float w = x[i] * x[i];
    *sumlx += w * x[i] * l;
    *suml2 += w * l * l;
  }
}

void SymmetricQuants(int n, int nmax, const float* x, float iscale, int8_t* l) {
  for (int i = 0; i < n; ++i) {
    l[i] = static_cast<int8_t>(nmax + std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
  }
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights: the value of largest
// magnitude maps to -nmax, then 18 nearby inverse scales are tried, keeping the one with the
// best x^2-weighted least-squares fit. l receives quants offset by +nmax; returns the scale.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* l) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(l, l + n, 0);
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx, suml2;
  SymmetricFit(n, nmax, x, iscale, &sumlx, &suml2);
  SymmetricQuants(n, nmax, x, iscale, l);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    SymmetricFit(n, nmax, x, iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      SymmetricQuants(n, nmax, x, iscale, l);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Fits each `group`-element group of one super-block with `make_quants` (MakeQxQuants or
// MakeQ3Quants: quants + half_range to l, the group's scale returned) into scales; returns
// the scale of largest magnitude, with its sign.
float FitGroups(float (*make_quants)(int, int, const float*, int8_t*), int group, int half_range,
                const float* x, int8_t* l, float* scales) {
  const int n_groups = kQK_K / group;
  for (int g = 0; g < n_groups; ++g) {
    scales[g] = make_quants(group, half_range, x + group * g, l + group * g);
  }
  return SignedAbsMax(scales, n_groups);
}

// Requantizes n elements against their stored scale d, to quants -half_range..half_range-1
// stored + half_range; a group whose scale is 0 keeps l as it is.
void RequantizeGroup(int n, int half_range, const float* x, float d, int8_t* l) {
  if (d == 0.0f) return;
  for (int i = 0; i < n; ++i) {
    const int q = NearestInt(x[i] / d);
    l[i] = static_cast<int8_t>(std::clamp(q, -half_range, half_range - 1) + half_range);
  }
}

// Splits the 6-bit quants (0..63) of one super-block into ql (low 4 bits) and qh (top 2 bits).
// Each 128-element half uses 64 ql bytes and 32 qh bytes: ql[l] holds elements l (low nibble)
// and l+64 (high), ql[l+32] elements l+32 and l+96; qh[l] the top bits of l, l+32, l+64, l+96.
void PackQ6K(const int8_t* l, BlockQ6_K* y) {
  for (int h = 0; h < 2; ++h) {
    const int8_t* lh = l + 128 * h;
    uint8_t* ql = y->ql + 64 * h;
    uint8_t* qh = y->qh + 32 * h;
    for (int i = 0; i < 32; ++i) {
      const int q1 = lh[i], q2 = lh[i + 32], q3 = lh[i + 64], q4 = lh[i + 96];
      ql[i] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[i + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[i] =
          static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

void QuantizeBlockQ6_K(const float* x, BlockQ6_K* y) {
  int8_t l[kQK_K];
  float scales[kQ6KNumGroups];
  const float max_scale = FitGroups(MakeQxQuants, kQ6KGroup, kQ6KHalfRange, x, l, scales);
  if (std::fabs(max_scale) < kGroupMaxEps) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  const float iscale = -128.f / max_scale;
  y->d = FloatToHalf(1 / iscale);
  for (int g = 0; g < kQ6KNumGroups; ++g) {
    y->scales[g] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[g])));
  }
  // Requantize against the stored scales; groups whose scale rounded to 0 keep the first pass.
  for (int g = 0; g < kQ6KNumGroups; ++g) {
    RequantizeGroup(kQ6KGroup, kQ6KHalfRange, x + kQ6KGroup * g, HalfToFloat(y->d) * y->scales[g],
                    l + kQ6KGroup * g);
  }
  PackQ6K(l, y);
}

// ---------------------------------------------------------------------------------------------
// Q3_K: 16 groups of 16 with a 3-bit quant and a 6-bit signed scale each.

constexpr int kQ3KGroup = 16;
constexpr int kQ3KNumGroups = kQK_K / kQ3KGroup;
constexpr int kQ3KHalfRange = 4;     // quants are -4..3.
constexpr int kQ3KScaleOffset = 32;  // scales are -32..31, stored + 32.
constexpr int kQ3KRefineRounds = 5;  // make_q3_quants' coordinate-descent passes.

// ggml's make_q3_quants with do_rmse: the signed extreme maps to -nmax, then single quants
// are moved while that improves the x^2-weighted least-squares fit. l receives quants + nmax.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* l) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(l, l + n, 0);
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int q = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    l[i] = static_cast<int8_t>(q);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * q;
    suml2 += w * q * q;
  }
  for (int round = 0; round < kQ3KRefineRounds; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * l[i];
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * l[i] * l[i];
      const int q = std::clamp(NearestInt(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (q == l[i]) continue;
      slx += w * x[i] * q;
      sl2 += w * q * q;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        l[i] = static_cast<int8_t>(q);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) l[i] = static_cast<int8_t>(l[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Scale j of the 12 packed Q3_K bytes, minus its offset: the low 4 bits are nibbles of bytes
// 0-7 (groups 0-7 low, 8-15 high nibbles), the top 2 bits pairs of bytes 8-11.
int UnpackScaleQ3K(int j, const uint8_t* packed) {
  const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
  const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - kQ3KScaleOffset;
}

void PackScaleQ3K(int j, int stored, uint8_t* packed) {  // stored in 0..63; packed zeroed.
  if (j < 8) {
    packed[j] = static_cast<uint8_t>(stored & 0xF);
  } else {
    packed[j - 8] |= static_cast<uint8_t>((stored & 0xF) << 4);
  }
  packed[8 + j % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (j / 4)));
}

// Packs 2-bit values (0..3) of one super-block: in each 128-element half, byte l holds
// elements l, l + 32, l + 64, l + 96 at bits 0, 2, 4, 6 (Q2_K and Q3_K).
void PackTwoBits(const int8_t* l, uint8_t* qs) {
  for (int h = 0; h < kQK_K / 128; ++h) {
    const int8_t* lh = l + 128 * h;
    for (int i = 0; i < 32; ++i) {
      qs[32 * h + i] =
          static_cast<uint8_t>(lh[i] | (lh[i + 32] << 2) | (lh[i + 64] << 4) | (lh[i + 96] << 6));
    }
  }
}

void QuantizeBlockQ3_K(const float* x, BlockQ3_K* y) {
  int8_t l[kQK_K];
  float scales[kQ3KNumGroups];
  const float max_scale = FitGroups(MakeQ3Quants, kQ3KGroup, kQ3KHalfRange, x, l, scales);
  std::memset(y->scales, 0, sizeof(y->scales));
  if (max_scale != 0) {
    const float iscale = -32.f / max_scale;
    for (int g = 0; g < kQ3KNumGroups; ++g) {
      // ggml narrows to int8_t before clamping.
      const int8_t q = static_cast<int8_t>(NearestInt(iscale * scales[g]));
      PackScaleQ3K(g, std::clamp<int>(q, -32, 31) + kQ3KScaleOffset, y->scales);
    }
    y->d = FloatToHalf(1 / iscale);
  } else {
    y->d = FloatToHalf(0.f);
  }
  // Requantize against the stored scales; groups whose scale is 0 keep the first pass.
  for (int g = 0; g < kQ3KNumGroups; ++g) {
    RequantizeGroup(kQ3KGroup, kQ3KHalfRange, x + kQ3KGroup * g,
                    HalfToFloat(y->d) * UnpackScaleQ3K(g, y->scales), l + kQ3KGroup * g);
  }
  // Bit b of hmask[m] is the high bit of element 32 b + m; the low two bits go to qs.
  std::memset(y->hmask, 0, sizeof(y->hmask));
  for (int j = 0; j < kQK_K; ++j) {
    if (l[j] > 3) {
      y->hmask[j % 32] |= static_cast<uint8_t>(1 << (j / 32));
      l[j] = static_cast<int8_t>(l[j] - kQ3KHalfRange);
    }
  }
  PackTwoBits(l, y->qs);
}

// ---------------------------------------------------------------------------------------------
// Q2_K: 16 groups of 16 with a 2-bit quant, a 4-bit scale and a 4-bit min each.

constexpr int kQ2KGroup = 16;
constexpr int kQ2KNumGroups = kQK_K / kQ2KGroup;
constexpr int kQ2KMaxQ = 3;
constexpr float kQ2KScaleMax = 15.f;  // scales and mins are 4-bit.

void QuantizeBlockQ2_K(const float* x, BlockQ2_K* y) {
  uint8_t l[kQK_K];
  float scales[kQ2KNumGroups];
  float mins[kQ2KNumGroups];
  float weights[kQ2KGroup];
  float max_scale = 0;
  float max_min = 0;
  for (int g = 0; g < kQ2KNumGroups; ++g) {
    const float* xg = x + kQ2KGroup * g;
    for (int i = 0; i < kQ2KGroup; ++i) weights[i] = std::fabs(xg[i]);
    scales[g] =
        MakeQkx2Quants(kQ2KGroup, kQ2KMaxQ, xg, weights, kQ2KGrid, l + kQ2KGroup * g, &mins[g]);
    if (scales[g] > max_scale) max_scale = scales[g];
    if (mins[g] > max_min) max_min = mins[g];
  }
  // Bytes are plain int -> uint8_t narrowings, as in ggml (a negative fit wraps around).
  if (max_scale > 0) {
    const float iscale = kQ2KScaleMax / max_scale;
    for (int g = 0; g < kQ2KNumGroups; ++g) {
      y->scales[g] = static_cast<uint8_t>(NearestInt(iscale * scales[g]));
    }
    y->d = FloatToHalf(max_scale / kQ2KScaleMax);
  } else {
    std::memset(y->scales, 0, sizeof(y->scales));
    y->d = FloatToHalf(0.f);
  }
  if (max_min > 0) {
    const float iscale = kQ2KScaleMax / max_min;
    for (int g = 0; g < kQ2KNumGroups; ++g) {
      y->scales[g] |= static_cast<uint8_t>(NearestInt(iscale * mins[g]) << 4);
    }
    y->dmin = FloatToHalf(max_min / kQ2KScaleMax);
  } else {
    y->dmin = FloatToHalf(0.f);
  }
  for (int g = 0; g < kQ2KNumGroups; ++g) {
    const float d = HalfToFloat(y->d) * (y->scales[g] & 0xF);
    if (d == 0.0f) continue;
    const float dm = HalfToFloat(y->dmin) * (y->scales[g] >> 4);
    for (int i = 0; i < kQ2KGroup; ++i) {
      const int q = NearestInt((x[kQ2KGroup * g + i] + dm) / d);
      l[kQ2KGroup * g + i] = static_cast<uint8_t>(std::clamp(q, 0, kQ2KMaxQ));
    }
  }
  int8_t l8[kQK_K];
  std::copy(l, l + kQK_K, l8);
  PackTwoBits(l8, y->qs);
}

// ---------------------------------------------------------------------------------------------
// IQ4_XS: IQ4_NL blocks of 32 under one f16 scale, with 6-bit signed sub-block scales.

constexpr int kIQ4XSNumSub = kQK_K / kQK4_NL;
constexpr int kIQ4XSTries = 7;         // quantize_row_iq4_xs_ref searches the scale.
constexpr int kIQ4XSScaleOffset = 32;  // sub-block scales are -32..31, stored + 32.

void QuantizeBlockIQ4_XS(const float* x, BlockIQ4_XS* y) {
  uint8_t l[kQK_K];
  float scales[kIQ4XSNumSub];
  float max_scale = 0, amax_scale = 0;
  for (int b = 0; b < kIQ4XSNumSub; ++b) {
    scales[b] = FitIQ4NLBlock(x + kQK4_NL * b, kIQ4XSTries, l + kQK4_NL * b);
    if (std::fabs(scales[b]) > amax_scale) {
      amax_scale = std::fabs(scales[b]);
      max_scale = scales[b];
    }
  }
  const float d = -max_scale / kIQ4XSScaleOffset;
  y->d = FloatToHalf(d);
  const float id = d != 0.0f ? 1 / d : 0.f;
  y->scales_h = 0;
  std::memset(y->scales_l, 0, sizeof(y->scales_l));
  for (int b = 0; b < kIQ4XSNumSub; ++b) {
    // Requantized against the f32 super-scale (not its f16 rounding), as ggml does.
    const int ls = std::clamp(NearestInt(id * scales[b]), -32, 31);
    const float dl = d * ls;
    const float idl = dl != 0.0f ? 1 / dl : 0.f;
    for (int j = 0; j < kQK4_NL; ++j) l[kQK4_NL * b + j] = NearestIQ4NL(idl * x[kQK4_NL * b + j]);
    const int stored = ls + kIQ4XSScaleOffset;
    y->scales_l[b / 2] |= static_cast<uint8_t>((stored & 0xF) << (4 * (b % 2)));
    y->scales_h |= static_cast<uint16_t>((stored >> 4) << (2 * b));
  }
  for (int b = 0; b < kIQ4XSNumSub; ++b) PackNibbles(l + kQK4_NL * b, y->qs + 16 * b);
}

// ---------------------------------------------------------------------------------------------
// Q8_K

constexpr int kQ8KGroup = 16;  // elements per bsums entry.

void QuantizeBlockQ8_K(const float* x, BlockQ8_K* y) {
  float max = 0;
  float amax = 0;
  for (int j = 0; j < kQK_K; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0) {
    // ggml leaves bsums untouched here; zero them, which is also their true value.
    std::memset(y, 0, sizeof(*y));
    return;
  }
  // -127 (not -128) keeps every quant in [-127, 127], which the SIMD dot products rely on.
  const float iscale = -127.f / max;
  for (int j = 0; j < kQK_K; ++j) {
    y->qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
  }
  for (int g = 0; g < kQK_K / kQ8KGroup; ++g) {
    int sum = 0;
    for (int i = 0; i < kQ8KGroup; ++i) sum += y->qs[kQ8KGroup * g + i];
    y->bsums[g] = static_cast<int16_t>(sum);
  }
  y->d = 1 / iscale;
}

// ---------------------------------------------------------------------------------------------
// Plain types

void FloatToHalfRow(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // ggml's software conversion turns every NaN into the canonical quiet NaN 0x7E00 (with
    // sign), whereas F16C keeps the payload's top bits; follow ggml.
    y[i] = std::isnan(x[i]) ? static_cast<uint16_t>(((FloatBits(x[i]) >> 16) & 0x8000u) | 0x7E00u)
                            : FloatToHalf(x[i]);
  }
}

void HalfToFloatRow(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = HalfToFloat(x[i]);
}

void FloatToBF16Row(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FloatToBF16(x[i]);
}

void BF16ToFloatRow(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = BF16ToFloat(x[i]);
}

void FloatToI32Row(const float* x, int32_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>(std::lrint(x[i]));
}

void I32ToFloatRow(const int32_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Row quantizers

namespace {

// Applies a block quantizer to each block of a row.
template <typename Block, int kBlockSize, void (*kFn)(const float*, Block*)>
void QuantizeBlocks(const float* x, Block* y, int64_t n) {
  for (int64_t b = 0; b < n / kBlockSize; ++b) kFn(x + b * kBlockSize, y + b);
}

// The fifth bit of element i of sub-block `sub` (as a value): Q5_K's, none in Q4_K.
int FifthBit(const BlockQ4_K&, int, int) { return 0; }
int FifthBit(const BlockQ5_K& x, int i, int sub) { return x.qh[i] & (1 << sub) ? kFifthBit : 0; }

// Q4_K and Q5_K rows: each 32-byte chunk of qs holds two sub-blocks (low nibbles the first,
// high the second) with 6-bit scales and mins.
template <typename Block>
void DequantizeRowScaleMinK(const Block* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = HalfToFloat(x[b].d);
    const float dmin = HalfToFloat(x[b].dmin);
    for (int c = 0; c < kQK_K / 64; ++c, y += 64) {
      const uint8_t* q = x[b].qs + 32 * c;
      const auto [d1, m1, d2, m2] = SubBlockPairK4(x[b].scales, c, d, dmin);
      for (int i = 0; i < 32; ++i) y[i] = d1 * ((q[i] & 0xF) + FifthBit(x[b], i, 2 * c)) - m1;
      for (int i = 0; i < 32; ++i) {
        y[i + 32] = d2 * ((q[i] >> 4) + FifthBit(x[b], i, 2 * c + 1)) - m2;
      }
    }
  }
}

}  // namespace

void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  QuantizeBlocks<BlockQ4_0, kQK4_0, QuantizeBlockQ4_0>(x, y, n);
}
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  QuantizeBlocks<BlockQ8_0, kQK8_0, QuantizeBlockQ8_0>(x, y, n);
}
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  QuantizeBlocks<BlockQ4_K, kQK_K, QuantizeBlockQ4_K>(x, y, n);
}
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  QuantizeBlocks<BlockQ6_K, kQK_K, QuantizeBlockQ6_K>(x, y, n);
}
void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n) {
  QuantizeBlocks<BlockQ8_K, kQK_K, QuantizeBlockQ8_K>(x, y, n);
}
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n) {
  QuantizeBlocks<BlockQ5_0, kQK5_0, QuantizeBlockQ5_0>(x, y, n);
}
void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n) {
  QuantizeBlocks<BlockQ5_1, kQK5_1, QuantizeBlockQ5_1>(x, y, n);
}
void QuantizeRowQ2_K(const float* x, BlockQ2_K* y, int64_t n) {
  QuantizeBlocks<BlockQ2_K, kQK_K, QuantizeBlockQ2_K>(x, y, n);
}
void QuantizeRowQ3_K(const float* x, BlockQ3_K* y, int64_t n) {
  QuantizeBlocks<BlockQ3_K, kQK_K, QuantizeBlockQ3_K>(x, y, n);
}
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n) {
  QuantizeBlocks<BlockQ5_K, kQK_K, QuantizeBlockQ5_K>(x, y, n);
}
void QuantizeRowIQ4_NL(const float* x, BlockIQ4_NL* y, int64_t n) {
  QuantizeBlocks<BlockIQ4_NL, kQK4_NL, QuantizeBlockIQ4_NL>(x, y, n);
}
void QuantizeRowIQ4_XS(const float* x, BlockIQ4_XS* y, int64_t n) {
  QuantizeBlocks<BlockIQ4_XS, kQK_K, QuantizeBlockIQ4_XS>(x, y, n);
}
void QuantizeRowMXFP4(const float* x, BlockMXFP4* y, int64_t n) {
  QuantizeBlocks<BlockMXFP4, kQKMXFP4, QuantizeBlockMXFP4>(x, y, n);
}

// ---------------------------------------------------------------------------------------------
// Row dequantizers (same operation order as ggml so that results are bit-identical)

void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n) {
  constexpr int kHalf = kQK4_0 / 2;
  for (int64_t b = 0; b < n / kQK4_0; ++b, y += kQK4_0) {
    const float d = HalfToFloat(x[b].d);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = ((x[b].qs[j] & 0x0F) - 8) * d;
      y[j + kHalf] = ((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b, y += kQK8_0) {
    const float d = HalfToFloat(x[b].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = x[b].qs[j] * d;
  }
}

void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n) { DequantizeRowScaleMinK(x, y, n); }

void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = HalfToFloat(x[b].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = x[b].ql + 64 * h;
      const uint8_t* qh = x[b].qh + 32 * h;
      const int8_t* sc = x[b].scales + 8 * h;
      for (int i = 0; i < 32; ++i) {
        const int is = i / 16;
        const int q1 = ((ql[i] & 0xF) | (((qh[i] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[i + 32] & 0xF) | (((qh[i] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4)) - 32;
        y[i] = d * sc[is + 0] * q1;
        y[i + 32] = d * sc[is + 2] * q2;
        y[i + 64] = d * sc[is + 4] * q3;
        y[i + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK5_0; ++b, y += kQK5_0) {
    const float d = HalfToFloat(x[b].d);
    int q[kQK5_0];
    UnpackQ5(x[b].qs, x[b].qh, q);
    for (int j = 0; j < kQK5_0; ++j) y[j] = (q[j] - 16) * d;
  }
}

void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK5_1; ++b, y += kQK5_1) {
    const float d = HalfToFloat(x[b].d);
    const float m = HalfToFloat(x[b].m);
    int q[kQK5_1];
    UnpackQ5(x[b].qs, x[b].qh, q);
    for (int j = 0; j < kQK5_1; ++j) y[j] = q[j] * d + m;
  }
}

void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = HalfToFloat(x[b].d);
    const float dmin = HalfToFloat(x[b].dmin);
    // Group g: bits 2 (g % 8 / 2) of bytes 32 (g / 8) + 16 (g % 2) + 0..15.
    for (int g = 0; g < kQ2KNumGroups; ++g, y += kQ2KGroup) {
      const uint8_t sc = x[b].scales[g];
      const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
      const uint8_t* q = x[b].qs + 32 * (g / 8) + 16 * (g % 2);
      const int shift = 2 * ((g % 8) / 2);
      for (int i = 0; i < kQ2KGroup; ++i) y[i] = dl * ((q[i] >> shift) & 3) - ml;
    }
  }
}

void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = HalfToFloat(x[b].d);
    // Group g as in Q2_K; its high bits are bit g / 2 of hmask[16 (g % 2) + 0..15].
    for (int g = 0; g < kQ3KNumGroups; ++g, y += kQ3KGroup) {
      const float dl = d * UnpackScaleQ3K(g, x[b].scales);
      const uint8_t* q = x[b].qs + 32 * (g / 8) + 16 * (g % 2);
      const uint8_t* hm = x[b].hmask + 16 * (g % 2);
      const int shift = 2 * ((g % 8) / 2);
      const int bit = 1 << (g / 2);
      for (int i = 0; i < kQ3KGroup; ++i) {
        y[i] = dl * (((q[i] >> shift) & 3) - ((hm[i] & bit) ? 0 : kQ3KHalfRange));
      }
    }
  }
}

void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t n) { DequantizeRowScaleMinK(x, y, n); }

void DequantizeRowIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_NL; ++b, y += kQK4_NL) {
    const float d = HalfToFloat(x[b].d);
    for (int j = 0; j < kNibbleHalf; ++j) {
      y[j] = d * kIQ4NLValues[x[b].qs[j] & 0xF];
      y[j + kNibbleHalf] = d * kIQ4NLValues[x[b].qs[j] >> 4];
    }
  }
}

// Sub-block j's scale of an IQ4_XS block, minus its offset.
int IQ4XSScale(const BlockIQ4_XS& x, int j) {
  const int low = (x.scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
  const int high = (x.scales_h >> (2 * j)) & 3;
  return (low | (high << 4)) - kIQ4XSScaleOffset;
}

void DequantizeRowIQ4_XS(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = HalfToFloat(x[b].d);
    for (int j = 0; j < kIQ4XSNumSub; ++j, y += kQK4_NL) {
      const float dl = d * IQ4XSScale(x[b], j);
      const uint8_t* qs = x[b].qs + 16 * j;
      for (int i = 0; i < kNibbleHalf; ++i) {
        y[i] = dl * kIQ4NLValues[qs[i] & 0xF];
        y[i + kNibbleHalf] = dl * kIQ4NLValues[qs[i] >> 4];
      }
    }
  }
}

void DequantizeRowMXFP4(const BlockMXFP4* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKMXFP4; ++b, y += kQKMXFP4) {
    const float d = E8M0ToFloatHalf(x[b].e);
    for (int j = 0; j < kNibbleHalf; ++j) {
      y[j] = kMXFP4Values[x[b].qs[j] & 0xF] * d;
      y[j + kNibbleHalf] = kMXFP4Values[x[b].qs[j] >> 4] * d;
    }
  }
}

void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = x[b].d * x[b].qs[j];
  }
}

// ---------------------------------------------------------------------------------------------
// Dispatch

namespace {

void F32Row(const float* x, float* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

// A type's row converters, with its element or block type T erased.
struct RowCodec {
  void (*quantize)(const float* src, void* dst, int64_t n);
  void (*dequantize)(const void* src, float* dst, int64_t n);
};

template <typename T, void (*kQuantize)(const float*, T*, int64_t),
          void (*kDequantize)(const T*, float*, int64_t)>
constexpr RowCodec kCodec{
    [](const float* src, void* dst, int64_t n) { kQuantize(src, static_cast<T*>(dst), n); },
    [](const void* src, float* dst, int64_t n) {
      kDequantize(static_cast<const T*>(src), dst, n);
    }};

// What an out-of-range DType value gets: rows are left as they are.
constexpr RowCodec kNoCodec{[](const float*, void*, int64_t) {},
                            [](const void*, float*, int64_t) {}};

const RowCodec& CodecOf(DType type) {
  switch (type) {
    case DType::kF32:
      return kCodec<float, F32Row, F32Row>;
    case DType::kF16:
      return kCodec<uint16_t, FloatToHalfRow, HalfToFloatRow>;
    case DType::kBF16:
      return kCodec<uint16_t, FloatToBF16Row, BF16ToFloatRow>;
    case DType::kI32:
      return kCodec<int32_t, FloatToI32Row, I32ToFloatRow>;
    case DType::kQ8_0:
      return kCodec<BlockQ8_0, QuantizeRowQ8_0, DequantizeRowQ8_0>;
    case DType::kQ4_0:
      return kCodec<BlockQ4_0, QuantizeRowQ4_0, DequantizeRowQ4_0>;
    case DType::kQ4_K:
      return kCodec<BlockQ4_K, QuantizeRowQ4_K, DequantizeRowQ4_K>;
    case DType::kQ6_K:
      return kCodec<BlockQ6_K, QuantizeRowQ6_K, DequantizeRowQ6_K>;
    case DType::kQ5_0:
      return kCodec<BlockQ5_0, QuantizeRowQ5_0, DequantizeRowQ5_0>;
    case DType::kQ5_1:
      return kCodec<BlockQ5_1, QuantizeRowQ5_1, DequantizeRowQ5_1>;
    case DType::kQ2_K:
      return kCodec<BlockQ2_K, QuantizeRowQ2_K, DequantizeRowQ2_K>;
    case DType::kQ3_K:
      return kCodec<BlockQ3_K, QuantizeRowQ3_K, DequantizeRowQ3_K>;
    case DType::kQ5_K:
      return kCodec<BlockQ5_K, QuantizeRowQ5_K, DequantizeRowQ5_K>;
    case DType::kIQ4_NL:
      return kCodec<BlockIQ4_NL, QuantizeRowIQ4_NL, DequantizeRowIQ4_NL>;
    case DType::kIQ4_XS:
      return kCodec<BlockIQ4_XS, QuantizeRowIQ4_XS, DequantizeRowIQ4_XS>;
    case DType::kMXFP4:
      return kCodec<BlockMXFP4, QuantizeRowMXFP4, DequantizeRowMXFP4>;
  }
  return kNoCodec;
}

}  // namespace

void QuantizeRow(DType type, const float* src, void* dst, int64_t n) {
  CodecOf(type).quantize(src, dst, n);
}

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  CodecOf(type).dequantize(src, dst, n);
}

}  // namespace tg
