// ROPE: rotary position embedding (normal and neox pairing, freq factors, YaRN, partial
// rotation), with a per-token cos/sin cache shared by all heads of the token.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd_math.h"
#include "core/ops.h"

namespace tg::cpu {
namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;
constexpr double kYarnMinRampWidth = 0.001;  // ggml's guard against a zero-width ramp.

bool IsNeox(const RopeParams& r) { return (r.mode & kRopeNeox) != 0; }

// Per pair i, theta = pos * freq[i]: freq_base^(-2i/n_dims) / ff[i], blended between the
// interpolated (freq_scale) and extrapolated frequency by the YaRN ramp. Double precision so
// large positions keep their accuracy.
void PairFrequencies(const RopeParams& r, const Tensor* ff, std::vector<double>* freq) {
  const int half = r.n_dims / 2;
  freq->resize(half);
  const auto [lo, hi] = YarnRampOf(r);
  // base^(-2i/n_dims) by repeated multiplication: one pow per call instead of one per
  // pair (decoding calls ROPE per token), and in double the drift stays ~1e-15.
  const double step = std::pow(r.freq_base, -2.0 / r.n_dims);
  double base_freq = 1.0;
  for (int i = 0; i < half; ++i, base_freq *= step) {
    double f = base_freq;
    if (ff != nullptr) {
      float factor;
      std::memcpy(&factor, static_cast<const uint8_t*>(ff->data) + i * ff->nb[0], sizeof(float));
      f /= factor;
    }
    double ramp_mix = 0.0;
    if (r.ext_factor != 0.0) {
      const double y = (i - lo) / std::max(kYarnMinRampWidth, hi - lo);
      ramp_mix = (1.0 - std::min(1.0, std::max(0.0, y))) * double{r.ext_factor};
    }
    (*freq)[i] = f * (double{r.freq_scale} * (1.0 - ramp_mix) + ramp_mix);
  }
}

// Fills the cos/sin cache for one position, mscale folded in. Normal mode: cs[k] and
// sn[k] per element k with sn[2i] = -sin so y = x * cs + swap_pairs(x) * sn; neox: per pair.
void FillCache(const RopeParams& r, const std::vector<double>& freq, double pos, float mscale,
               float* cs, float* sn) {
  const int half = r.n_dims / 2;
  for (int i = 0; i < half; ++i) {
    const double theta = pos * freq[i];
    // Reduce in double, then single-precision sin/cos of a small argument.
    const float t = static_cast<float>(theta - kTwoPi * std::nearbyint(theta / kTwoPi));
    const float c = std::cos(t) * mscale;
    const float s = std::sin(t) * mscale;
    if (IsNeox(r)) {
      cs[i] = c;
      sn[i] = s;
    } else {
      cs[2 * i] = cs[2 * i + 1] = c;
      sn[2 * i] = -s;
      sn[2 * i + 1] = s;
    }
  }
}

// (x[2i], x[2i+1]) pairs; d may equal x.
void RotateNormal(float* d, const float* x, const float* cs, const float* sn, int n_dims) {
  int i = 0;
#if defined(TG_SIMD)
  for (; i + simd::kLanes <= n_dims; i += simd::kLanes) {
    const simd::VecF v = simd::Load(x + i);
    simd::Store(d + i, simd::Fmadd(v, simd::Load(cs + i),
                                   simd::Mul(simd::SwapPairs(v), simd::Load(sn + i))));
  }
#endif
  for (; i < n_dims; i += 2) {
    const float x0 = x[i], x1 = x[i + 1];
    d[i] = x0 * cs[i] + x1 * sn[i];
    d[i + 1] = x1 * cs[i + 1] + x0 * sn[i + 1];
  }
}

// (x[i], x[i + n_dims/2]) pairs; d may equal x.
void RotateNeox(float* d, const float* x, const float* cs, const float* sn, int n_dims) {
  const int half = n_dims / 2;
  int i = 0;
#if defined(TG_SIMD)
  using simd::Load;
  using simd::Mul;
  for (; i + simd::kLanes <= half; i += simd::kLanes) {
    const simd::VecF x0 = Load(x + i), x1 = Load(x + half + i);
    const simd::VecF c = Load(cs + i), s = Load(sn + i);
    simd::Store(d + i, simd::Sub(Mul(x0, c), Mul(x1, s)));
    simd::Store(d + half + i, simd::Fmadd(x0, s, Mul(x1, c)));
  }
#endif
  for (; i < half; ++i) {
    const float x0 = x[i], x1 = x[half + i];
    d[i] = x0 * cs[i] - x1 * sn[i];
    d[half + i] = x0 * sn[i] + x1 * cs[i];
  }
}

}  // namespace

// Rows (head, token, i3) are split over threads, heads fastest, so a thread meets each token
// once in a run and computes its cos/sin cache once.
void ComputeRope(const ComputeParams& p, Tensor* dst) {
  const Tensor& a = *dst->src[0];
  const Tensor& pos = *dst->src[1];
  const RopeParams r = RopeParamsOf(*dst);
  const float mscale = RopeMscaleOf(r);
  const int64_t head_dim = a.ne[0], n_head = a.ne[1], n_tok = a.ne[2];

  thread_local std::vector<double> freq;
  thread_local std::vector<float> cache;
  PairFrequencies(r, dst->src[2], &freq);
  cache.resize(2 * static_cast<size_t>(r.n_dims));
  float* cs = cache.data();
  float* sn = cache.data() + r.n_dims;

  int64_t begin, end;
  SplitRange(a.NumRows(), p.ith, p.nth, &begin, &end);
  int64_t cached_tok = -1;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t h = row % n_head, t = (row / n_head) % n_tok, i3 = row / (n_head * n_tok);
    if (t != cached_tok) {
      int32_t position;
      std::memcpy(&position, static_cast<const uint8_t*>(pos.data) + t * pos.nb[0],
                  sizeof(position));
      FillCache(r, freq, position, mscale, cs, sn);
      cached_tok = t;
    }
    const auto* x = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a.data) +
                                                   h * a.nb[1] + t * a.nb[2] + i3 * a.nb[3]);
    auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(dst->data) + h * dst->nb[1] +
                                       t * dst->nb[2] + i3 * dst->nb[3]);
    if (a.nb[0] != sizeof(float)) {  // strided source: gather into dst, rotate in place.
      for (int64_t i = 0; i < head_dim; ++i) {
        d[i] = *reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(x) + i * a.nb[0]);
      }
      x = d;
    }
    if (IsNeox(r)) {
      RotateNeox(d, x, cs, sn, r.n_dims);
    } else {
      RotateNormal(d, x, cs, sn, r.n_dims);
    }
    if (d != x) std::memmove(d + r.n_dims, x + r.n_dims, (head_dim - r.n_dims) * sizeof(float));
  }
}

}  // namespace tg::cpu
