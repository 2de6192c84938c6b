// SAMPLE: per F32 row of logits, a token id drawn as docs/ops.md specifies — the repetition
// penalty, then (temperature > 0) the top-k candidates by logit, their weights
// exp((l - l_max) / T) in f64, the top-p prefix, the min-p cut and one Philox draw at the
// row's position. The top k are found in one pass with a heap of the k best, most of the
// row rejected by one compare against the worst of them (8 or 16 logits at a time). Rows
// are split across threads; each thread's share of the scratch holds its penalized copy of
// the row and its candidates.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/philox.h"
#include "backends/cpu/kernels/row_walk.h"
#include "backends/cpu/kernels/simd_math.h"  // the intrinsics (and GCC 12's warning fix).
#include "core/ops.h"

namespace tg::cpu {
namespace {

constexpr size_t kScratchAlign = 64;

struct Candidate {
  float logit;
  int32_t id;
};

// Ranks a before b: larger logit first, the smaller id on ties.
bool Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

bool Penalized(const Tensor& dst) {
  return dst.src[2] != nullptr && SampleParamsOf(dst).repeat_penalty != 1.0f;
}

// Candidate slots one row needs: k, or the whole row.
int64_t CandidateSlots(const Tensor& dst) {
  const int64_t n = dst.src[0]->ne[0];
  const int64_t k = SampleParamsOf(dst).top_k;
  return k == 0 || k > n ? n : k;
}

size_t RoundUp(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// One thread's scratch: the penalized row (when there is a penalty), candidates, weights.
size_t ThreadScratch(const Tensor& dst) {
  const size_t row = Penalized(dst) ? dst.src[0]->ne[0] * sizeof(float) : 0;
  const size_t slots = static_cast<size_t>(CandidateSlots(dst));
  return RoundUp(row) + RoundUp(slots * sizeof(Candidate)) + RoundUp(slots * sizeof(double));
}

// Copies row x with each distinct recent id in [0, n) penalized: l / penalty when l > 0,
// else l * penalty (f32 arithmetic).
void PenalizeInto(const float* x, int64_t n, const int32_t* recent, int64_t w, float penalty,
                  float* out) {
  std::memcpy(out, x, n * sizeof(float));
  for (int64_t i = 0; i < w; ++i) {
    const int32_t t = recent[i];
    if (t < 0 || t >= n || std::find(recent, recent + i, t) != recent + i) continue;
    out[t] = x[t] > 0 ? x[t] / penalty : x[t] * penalty;
  }
}

// The first index of the largest value, NaN skipped; 0 when every value is NaN.
int32_t FirstLargest(const float* x, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

// Index of the first of x[i..i+width) above `floor`, or i + width when none is.
int64_t FirstAbove(const float* x, int64_t i, float floor) {
#if defined(TG_SIMD_AVX512)
  const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), _mm512_set1_ps(floor), _CMP_GT_OQ);
  return m == 0 ? i + 16 : i + __builtin_ctz(m);
#elif defined(TG_SIMD_AVX2)
  const int m =
      _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(floor), _CMP_GT_OQ));
  return m == 0 ? i + 8 : i + __builtin_ctz(m);
#else
  return x[i] > floor ? i : i + 1;
#endif
}

#if defined(TG_SIMD_AVX512)
constexpr int64_t kWidth = 16;
#elif defined(TG_SIMD_AVX2)
constexpr int64_t kWidth = 8;
#else
constexpr int64_t kWidth = 1;
#endif

// A logit as a candidate: NaN and -inf never are (false), +inf ranks as the largest float.
bool AsCandidate(float v, int64_t i, Candidate* c) {
  if (std::isnan(v) || v == -std::numeric_limits<float>::infinity()) return false;
  *c = {std::min(v, std::numeric_limits<float>::max()), static_cast<int32_t>(i)};
  return true;
}

// The best `k` candidates of x (k <= n), best first; returns how many there are. A heap keeps
// the k best so far with the worst on top; ids come in ascending order, so a later logit
// equal to the worst ranks after it and only a strictly larger one gets in.
int64_t TopK(const float* x, int64_t n, int64_t k, Candidate* heap) {
  int64_t size = 0;
  int64_t i = 0;
  for (; i < n && size < k; ++i) {
    if (AsCandidate(x[i], i, &heap[size])) std::push_heap(heap, heap + ++size, Before);
  }
  while (i < n) {
    if (i + kWidth <= n) {
      const int64_t j = FirstAbove(x, i, heap[0].logit);
      if (j >= i + kWidth) {
        i = j;
        continue;
      }
      i = j;
    }
    Candidate c;
    if (AsCandidate(x[i], i, &c) && Before(c, heap[0])) {
      std::pop_heap(heap, heap + size, Before);
      heap[size - 1] = c;
      std::push_heap(heap, heap + size, Before);
    }
    ++i;
  }
  std::sort_heap(heap, heap + size, Before);
  return size;
}

// Every candidate of x, best first.
int64_t AllSorted(const float* x, int64_t n, Candidate* out) {
  int64_t size = 0;
  for (int64_t i = 0; i < n; ++i) size += AsCandidate(x[i], i, &out[size]) ? 1 : 0;
  std::sort(out, out + size, Before);
  return size;
}

// The draw among m > 0 candidates, best first (docs/ops.md: weights, top-p, min-p, draw).
int32_t Draw(const Candidate* c, int64_t m, const SampleParams& p, double u, double* w) {
  double total = 0;
  for (int64_t i = 0; i < m; ++i) {
    w[i] = std::exp((static_cast<double>(c[i].logit) - static_cast<double>(c[0].logit)) /
                    static_cast<double>(p.temperature));
    total += w[i];
  }
  int64_t keep = m;
  if (p.top_p < 1) {
    const double nucleus = static_cast<double>(p.top_p) * total;
    double acc = 0;
    for (int64_t i = 0; i < m; ++i) {
      acc += w[i];
      if (acc >= nucleus) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0) {
    for (int64_t i = 1; i < keep; ++i) {
      if (w[i] < p.min_p) {
        keep = i;
        break;
      }
    }
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += w[i];
  const double target = u * kept;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += w[i];
    if (acc > target) return c[i].id;
  }
  return c[keep - 1].id;
}

}  // namespace

size_t SampleWorkSize(const Tensor* dst, int nth) { return nth * ThreadScratch(*dst); }

void ComputeSample(const ComputeParams& p, Tensor* dst) {
  const Tensor& logits = *dst->src[0];
  const auto* pos = static_cast<const int32_t*>(dst->src[1]->data);
  const SampleParams params = SampleParamsOf(*dst);
  const int64_t n = logits.ne[0];
  auto* scratch = static_cast<uint8_t*>(p.wdata) + p.ith * ThreadScratch(*dst);
  float* row = Penalized(*dst) ? reinterpret_cast<float*>(scratch) : nullptr;
  scratch += RoundUp(row != nullptr ? n * sizeof(float) : 0);
  const int64_t slots = CandidateSlots(*dst);
  auto* cands = reinterpret_cast<Candidate*>(scratch);
  auto* weights = reinterpret_cast<double*>(scratch + RoundUp(slots * sizeof(Candidate)));
  ForEachThreadRow(p, logits.ne, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* x = RowPtr<const float>(logits, i1, i2, i3);
    if (row != nullptr) {
      const Tensor& recent = *dst->src[2];
      PenalizeInto(x, n, static_cast<const int32_t*>(recent.data), recent.ne[0],
                   params.repeat_penalty, row);
      x = row;
    }
    int32_t* out = RowPtr<int32_t>(*dst, i1, i2, i3);
    if (params.temperature <= 0) {
      *out = FirstLargest(x, n);
      return;
    }
    const int64_t m = slots < n ? TopK(x, n, slots, cands) : AllSorted(x, n, cands);
    if (m == 0) {
      *out = 0;  // no candidate: every logit NaN or -inf.
      return;
    }
    const int32_t position = pos[i1 + logits.ne[1] * (i2 + logits.ne[2] * i3)];
    *out = Draw(cands, m, params, SampleUniform(params.seed, position), weights);
  });
}

}  // namespace tg::cpu
