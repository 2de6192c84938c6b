#include "core/quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

void QuantizeBlockQ4_0(const float* x, BlockQ4_0* y) {
  // The signed value of largest magnitude (first one on ties) maps to -8, so d may be negative.
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kQK4_0; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
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

// ---------------------------------------------------------------------------------------------
// Q4_K: 8 sub-blocks of 32 with a 4-bit quant, a 6-bit scale and a 6-bit min each.

constexpr int kQ4KSub = 32;                  // elements per sub-block.
constexpr int kQ4KNumSub = kQK_K / kQ4KSub;  // 8 sub-blocks.
constexpr int kQ4KMaxQ = 15;

// Search grid of make_qkx2_quants as quantize_row_q4_K_ref calls it.
constexpr float kQkx2RMin = -1.0f;
constexpr float kQkx2RDelta = 0.1f;
constexpr int kQkx2Steps = 20;

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

// Weighted squared error of reconstructing x as scale * l + min.
float AffineError(int n, const float* x, const float* weights, const uint8_t* l, float scale,
                  float min) {
  float error = 0;
  for (int i = 0; i < n; ++i) {
    float diff = scale * l[i] + min - x[i];
    diff = diff * diff;
    error += weights[i] * diff;
  }
  return error;
}

// ggml's make_qkx2_quants (squared error, no MAD): fits x ~ scale * l + min with min <= 0 by
// trying a grid of inverse scales around nmax / (max - min) and keeping the best weighted
// least-squares fit. Returns the scale; *neg_min receives -min (>= 0).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* l,
                     float* neg_min) {
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
  float best_error = AffineError(n, x, weights, l, scale, min);
  uint8_t candidate[kQ4KSub];
  for (int is = 0; is <= kQkx2Steps; ++is) {
    iscale = (kQkx2RMin + kQkx2RDelta * is + nmax) / (max - min);
    const Qkx2Sums s = QuantizeAffine(n, nmax, x, weights, iscale, min, candidate);
    const float det = sum_w * s.sum_l2 - s.sum_l * s.sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * s.sum_xl - sum_x * s.sum_l) / det;
    float this_min = (s.sum_l2 * sum_x - s.sum_l * s.sum_xl) / det;
    if (this_min > 0) {  // a positive offset is not representable: refit the scale alone.
      this_min = 0;
      this_scale = s.sum_xl / s.sum_l2;
    }
    const float error = AffineError(n, x, weights, candidate, this_scale, this_min);
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
void FitQ4KSubBlocks(const float* x, uint8_t* l, float* scales, float* mins) {
  float weights[kQ4KSub];
  for (int j = 0; j < kQ4KNumSub; ++j) {
    const float* xs = x + kQ4KSub * j;
    float sum_x2 = 0;
    for (int i = 0; i < kQ4KSub; ++i) sum_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sum_x2 / kQ4KSub);
    for (int i = 0; i < kQ4KSub; ++i) weights[i] = av_x + std::fabs(xs[i]);
    scales[j] = MakeQkx2Quants(kQ4KSub, kQ4KMaxQ, xs, weights, l + kQ4KSub * j, &mins[j]);
  }
}

void QuantizeBlockQ4_K(const float* x, BlockQ4_K* y) {
  uint8_t l[kQK_K];
  float scales[kQ4KNumSub];
  float mins[kQ4KNumSub];
  FitQ4KSubBlocks(x, l, scales, mins);
  float max_scale = 0;  // scales are positive since the min was subtracted.
  float max_min = 0;
  for (int j = 0; j < kQ4KNumSub; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQ4KNumSub; ++j) {
    PackScaleMinK4(j, SixBits(inv_scale * scales[j]), SixBits(inv_min * mins[j]), y->scales);
  }
  y->d = FloatToHalf(max_scale / 63.f);
  y->dmin = FloatToHalf(max_min / 63.f);
  // Requantize against the scales as stored; sub-blocks whose scale became 0 keep the quants
  // of the first pass (they dequantize to -min regardless).
  for (int j = 0; j < kQ4KNumSub; ++j) {
    uint8_t sc, m;
    UnpackScaleMinK4(j, y->scales, &sc, &m);
    const float d = HalfToFloat(y->d) * sc;
    if (d == 0.0f) continue;
    const float dm = HalfToFloat(y->dmin) * m;
    for (int i = 0; i < kQ4KSub; ++i) {
      const int q = NearestInt((x[kQ4KSub * j + i] + dm) / d);
      l[kQ4KSub * j + i] = static_cast<uint8_t>(std::clamp(q, 0, kQ4KMaxQ));
    }
  }
  // Each 32-byte chunk of qs holds two sub-blocks: low nibbles the first, high the second.
  for (int c = 0; c < kQK_K / 64; ++c) {
    const uint8_t* lc = l + 64 * c;
    for (int i = 0; i < 32; ++i)
      y->qs[32 * c + i] = static_cast<uint8_t>(lc[i] | (lc[i + 32] << 4));
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
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
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
  float max_scale = 0;  // signed scale of largest magnitude.
  float max_abs_scale = 0;
  for (int g = 0; g < kQ6KNumGroups; ++g) {
    scales[g] = MakeQxQuants(kQ6KGroup, kQ6KHalfRange, x + kQ6KGroup * g, l + kQ6KGroup * g);
    if (std::fabs(scales[g]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
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
    const float d = HalfToFloat(y->d) * y->scales[g];
    if (d == 0.0f) continue;
    for (int i = 0; i < kQ6KGroup; ++i) {
      const int q = NearestInt(x[kQ6KGroup * g + i] / d);
      l[kQ6KGroup * g + i] =
          static_cast<int8_t>(std::clamp(q, -kQ6KHalfRange, kQ6KHalfRange - 1) + kQ6KHalfRange);
    }
  }
  PackQ6K(l, y);
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

void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_0; ++b) QuantizeBlockQ4_0(x + b * kQK4_0, y + b);
}

void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) QuantizeBlockQ8_0(x + b * kQK8_0, y + b);
}

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) QuantizeBlockQ4_K(x + b * kQK_K, y + b);
}

void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) QuantizeBlockQ6_K(x + b * kQK_K, y + b);
}

void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) QuantizeBlockQ8_K(x + b * kQK_K, y + b);
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

void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = HalfToFloat(x[b].d);
    const float dmin = HalfToFloat(x[b].dmin);
    for (int c = 0; c < kQK_K / 64; ++c, y += 64) {
      const uint8_t* q = x[b].qs + 32 * c;
      uint8_t sc, m;
      UnpackScaleMinK4(2 * c, x[b].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      UnpackScaleMinK4(2 * c + 1, x[b].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int i = 0; i < 32; ++i) y[i] = d1 * (q[i] & 0xF) - m1;
      for (int i = 0; i < 32; ++i) y[i + 32] = d2 * (q[i] >> 4) - m2;
    }
  }
}

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

void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = x[b].d * x[b].qs[j];
  }
}

// ---------------------------------------------------------------------------------------------
// Dispatch

void QuantizeRow(DType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      return FloatToHalfRow(src, static_cast<uint16_t*>(dst), n);
    case DType::kBF16:
      return FloatToBF16Row(src, static_cast<uint16_t*>(dst), n);
    case DType::kI32:
      return FloatToI32Row(src, static_cast<int32_t*>(dst), n);
    case DType::kQ8_0:
      return QuantizeRowQ8_0(src, static_cast<BlockQ8_0*>(dst), n);
    case DType::kQ4_0:
      return QuantizeRowQ4_0(src, static_cast<BlockQ4_0*>(dst), n);
    case DType::kQ4_K:
      return QuantizeRowQ4_K(src, static_cast<BlockQ4_K*>(dst), n);
    case DType::kQ6_K:
      return QuantizeRowQ6_K(src, static_cast<BlockQ6_K*>(dst), n);
  }
}

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      return HalfToFloatRow(static_cast<const uint16_t*>(src), dst, n);
    case DType::kBF16:
      return BF16ToFloatRow(static_cast<const uint16_t*>(src), dst, n);
    case DType::kI32:
      return I32ToFloatRow(static_cast<const int32_t*>(src), dst, n);
    case DType::kQ8_0:
      return DequantizeRowQ8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case DType::kQ4_0:
      return DequantizeRowQ4_0(static_cast<const BlockQ4_0*>(src), dst, n);
    case DType::kQ4_K:
      return DequantizeRowQ4_K(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::kQ6_K:
      return DequantizeRowQ6_K(static_cast<const BlockQ6_K*>(src), dst, n);
  }
}

}  // namespace tg
