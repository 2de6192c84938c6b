// ROPE's rotation angle per (pair, position), shared by the CUDA kernel and the host tests:
// the CPU backend's numerics (backends/cpu/kernels/rope.cc): frequencies and angles in
// double, reduced to [-pi, pi] before single-precision cos/sin, YaRN as ggml's rope_yarn
// (its correction range and the output scale computed once on the host, RopeArgsOf in
// cuda_ops.h).
// Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_ROPE_MATH_H_
#define TENSORGRID_BACKENDS_CUDA_ROPE_MATH_H_

#include <cmath>
#include <cstdint>

#include "backends/cuda/host_device.h"

namespace tg::cuda {

struct RopeArgs {
  int n_dims = 0;
  bool neox = false;
  float freq_base = 10000.0f, freq_scale = 1.0f, ext_factor = 0.0f;
  float mscale = 1.0f;              // the output scale (core's RopeMscaleOf).
  double ramp_lo = 0, ramp_hi = 0;  // YaRN's ramp over the pairs (core's YarnRampOf).
};

// cos and sin (times r.mscale) of pair i's angle at position pos; factor: the pair's frequency
// factor (1 when there are none).
TG_HD void RopeCosSin(const RopeArgs& r, int i, float factor, int32_t pos, float* c, float* s) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kYarnMinRampWidth = 0.001;  // ggml's guard against a zero-width ramp.
  double f = pow(static_cast<double>(r.freq_base), -2.0 * i / r.n_dims) / factor;
  double ramp_mix = 0.0;
  if (r.ext_factor != 0.0f) {
    const double y = (i - r.ramp_lo) / fmax(kYarnMinRampWidth, r.ramp_hi - r.ramp_lo);
    ramp_mix = (1.0 - fmin(1.0, fmax(0.0, y))) * r.ext_factor;
  }
  f *= r.freq_scale * (1.0 - ramp_mix) + ramp_mix;
  const double theta = pos * f;
  const float t = static_cast<float>(theta - kTwoPi * rint(theta / kTwoPi));
  *c = cosf(t) * r.mscale;
  *s = sinf(t) * r.mscale;
}

// Element i0 (< n_dims) of a rotated row x (contiguous view through get(j)): its pair index,
// whether it is the pair's first element, and the partner element's index.
struct RopePair {
  int pair;
  bool first;
  int partner;
};
TG_HD RopePair RopePairOf(const RopeArgs& r, int i0) {
  if (r.neox) {
    const int half = r.n_dims / 2;
    return i0 < half ? RopePair{i0, true, i0 + half} : RopePair{i0 - half, false, i0 - half};
  }
  return (i0 % 2 == 0) ? RopePair{i0 / 2, true, i0 + 1} : RopePair{i0 / 2, false, i0 - 1};
}

// y for element i0 given its value x, its partner's value xp and the pair's cos/sin.
TG_HD float RopeRotate(bool first, float x, float xp, float c, float s) {
  return first ? x * c - xp * s : xp * s + x * c;
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_ROPE_MATH_H_
