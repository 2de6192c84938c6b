// Packed f32 GEMM: loop structure of Goto's algorithm (jc over N in kNc blocks, pc over K in
// kKc blocks, ic over M in kMc blocks, then NR x MR micro-tiles). Threads share each packed
// B block and split the M panels between them (or the N panels when M is too small).
#include "backends/cpu/kernels/gemm_f32.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/vec_dot.h"
#include "core/fp16.h"

#if defined(TG_CPU_AVX2) || defined(TG_CPU_AVX512)
#include <immintrin.h>
#endif

namespace tg::cpu {
namespace {

#if defined(TG_CPU_AVX512)
constexpr int kMr = 32;  // 2 zmm of C rows x 12 columns = 24 accumulators of 32 registers.
constexpr int kNr = 12;
#elif defined(TG_CPU_AVX2)
constexpr int kMr = 16;  // 2 ymm x 6 columns = 12 accumulators of 16 registers.
constexpr int kNr = 6;
#else
constexpr int kMr = 8;
constexpr int kNr = 4;
#endif

// Cache blocking: a kKc x kNr B micro-panel (18 KiB) stays in L1 while the A block
// (kMc x kKc, 576 KiB) streams from L2; the kKc x kNc B block (2.3 MiB) lives in L3.
constexpr int64_t kKc = 384;
constexpr int64_t kMc = 384;
constexpr int64_t kNc = 128 * kNr;
static_assert(kMc % kMr == 0);
constexpr size_t kAlign = 64;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

char* AlignUp(void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<char*>((u + kAlign - 1) / kAlign * kAlign);
}

// Block sizes for a problem: the maximum blocks, evened out so that no block is a small
// remainder (K = 512 runs as 2 x 256, not 384 + 128), never more than the problem itself.
struct Blocking {
  int64_t kc, nc, mc;
};

int64_t EvenBlock(int64_t n, int64_t max_block, int64_t multiple) {
  const int64_t blocks = (n + max_block - 1) / max_block;
  return RoundUp((n + blocks - 1) / blocks, multiple);
}

// mc is the A buffer's capacity; each thread evens out its own M range within it.
Blocking BlockingFor(int64_t m, int64_t n, int64_t k) {
  return {EvenBlock(k, kKc, 1), EvenBlock(n, kNc, kNr), std::min(kMc, RoundUp(m, kMr))};
}

size_t BPanelBytes(const Blocking& bl) { return RoundUp(bl.nc * bl.kc * 4, kAlign); }
size_t APanelBytes(const Blocking& bl) { return RoundUp(bl.mc * bl.kc * 4, kAlign); }

// Widens one weight row segment to f32 (F32 rows are used in place).
const float* WeightRowF32(const GemmA& a, int64_t row, int64_t k0, int64_t kc, float* tmp) {
  const char* src = static_cast<const char*>(a.data) + row * a.row_stride;
  switch (a.type) {
    case DType::kF16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(src) + k0;
      int64_t i = 0;
#if defined(TG_CPU_AVX512)
      for (; i + 16 <= kc; i += 16) {
        _mm512_storeu_ps(
            tmp + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
      }
#endif
      for (; i < kc; ++i) tmp[i] = HalfToFloat(h[i]);
      return tmp;
    }
    case DType::kBF16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(src) + k0;
      for (int64_t i = 0; i < kc; ++i) tmp[i] = BF16ToFloat(h[i]);
      return tmp;
    }
    default:
      return reinterpret_cast<const float*>(src) + k0;
  }
}

// Packs rows [m0, m0 + mc) x [k0, k0 + kc) of A as kMr-row panels, k-major, zero-padded.
void PackA(const GemmA& a, int64_t m_total, int64_t m0, int64_t mc, int64_t k0, int64_t kc,
           float* out, float* tmp) {
  for (int64_t p = 0; p < mc; p += kMr) {
    float* panel = out + p * kc;
    for (int r = 0; r < kMr; ++r) {
      const int64_t row = m0 + p + r;
      if (p + r >= mc || row >= m_total) {
        for (int64_t k = 0; k < kc; ++k) panel[k * kMr + r] = 0.0f;
        continue;
      }
      const float* src = WeightRowF32(a, row, k0, kc, tmp);
      for (int64_t k = 0; k < kc; ++k) panel[k * kMr + r] = src[k];
    }
  }
}

// Packs columns [n0, n0 + kNr) of B's [k0, k0 + kc) slice as one panel, k-major, zero-padded.
void PackBPanel(const GemmB& b, int64_t n_total, int64_t n0, int64_t k0, int64_t kc, float* out) {
  for (int j = 0; j < kNr; ++j) {
    const int64_t col = n0 + j;
    if (col >= n_total) {
      for (int64_t k = 0; k < kc; ++k) out[k * kNr + j] = 0.0f;
      continue;
    }
    const char* src = static_cast<const char*>(b.data) + col * b.row_stride + k0 * b.elem_stride;
    if (b.elem_stride == sizeof(float)) {
      const float* f = reinterpret_cast<const float*>(src);
      for (int64_t k = 0; k < kc; ++k) out[k * kNr + j] = f[k];
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        std::memcpy(&out[k * kNr + j], src + k * b.elem_stride, sizeof(float));
      }
    }
  }
}

// c[j * ldc + i] (+)= sum_k a[k * kMr + i] * b[k * kNr + j] for the full kMr x kNr tile.
#if defined(TG_CPU_AVX512)
void MicroKernel(int64_t kc, const float* a, const float* b, float* c, size_t ldc,
                 bool accumulate) {
  __m512 lo[kNr], hi[kNr];
#pragma GCC unroll 12
  for (int j = 0; j < kNr; ++j) lo[j] = hi[j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 a0 = _mm512_load_ps(a);
    const __m512 a1 = _mm512_load_ps(a + 16);
    _mm_prefetch(reinterpret_cast<const char*>(a + 8 * kMr), _MM_HINT_T0);
#pragma GCC unroll 12
    for (int j = 0; j < kNr; ++j) {
      const __m512 bj = _mm512_set1_ps(b[j]);
      lo[j] = _mm512_fmadd_ps(a0, bj, lo[j]);
      hi[j] = _mm512_fmadd_ps(a1, bj, hi[j]);
    }
    a += kMr;
    b += kNr;
  }
#pragma GCC unroll 12
  for (int j = 0; j < kNr; ++j) {
    float* cj = c + j * ldc;
    if (accumulate) {
      lo[j] = _mm512_add_ps(lo[j], _mm512_loadu_ps(cj));
      hi[j] = _mm512_add_ps(hi[j], _mm512_loadu_ps(cj + 16));
    }
    _mm512_storeu_ps(cj, lo[j]);
    _mm512_storeu_ps(cj + 16, hi[j]);
  }
}
#elif defined(TG_CPU_AVX2)
void MicroKernel(int64_t kc, const float* a, const float* b, float* c, size_t ldc,
                 bool accumulate) {
  __m256 lo[kNr], hi[kNr];
#pragma GCC unroll 6
  for (int j = 0; j < kNr; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 a0 = _mm256_load_ps(a);
    const __m256 a1 = _mm256_load_ps(a + 8);
#pragma GCC unroll 6
    for (int j = 0; j < kNr; ++j) {
      const __m256 bj = _mm256_broadcast_ss(b + j);
      lo[j] = _mm256_fmadd_ps(a0, bj, lo[j]);
      hi[j] = _mm256_fmadd_ps(a1, bj, hi[j]);
    }
    a += kMr;
    b += kNr;
  }
#pragma GCC unroll 6
  for (int j = 0; j < kNr; ++j) {
    float* cj = c + j * ldc;
    if (accumulate) {
      lo[j] = _mm256_add_ps(lo[j], _mm256_loadu_ps(cj));
      hi[j] = _mm256_add_ps(hi[j], _mm256_loadu_ps(cj + 8));
    }
    _mm256_storeu_ps(cj, lo[j]);
    _mm256_storeu_ps(cj + 8, hi[j]);
  }
}
#else
void MicroKernel(int64_t kc, const float* a, const float* b, float* c, size_t ldc,
                 bool accumulate) {
  float acc[kNr][kMr] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int j = 0; j < kNr; ++j) {
      for (int i = 0; i < kMr; ++i) acc[j][i] += a[k * kMr + i] * b[k * kNr + j];
    }
  }
  for (int j = 0; j < kNr; ++j) {
    for (int i = 0; i < kMr; ++i) c[j * ldc + i] = (accumulate ? c[j * ldc + i] : 0.0f) + acc[j][i];
  }
}
#endif

// A partial tile at the edge of C: computed into a full tile, then the valid part copied.
void EdgeKernel(int64_t kc, const float* a, const float* b, float* c, size_t ldc, bool accumulate,
                int mr, int nr) {
  alignas(kAlign) float tile[kNr * kMr];
  MicroKernel(kc, a, b, tile, kMr, false);
  for (int j = 0; j < nr; ++j) {
    for (int i = 0; i < mr; ++i) {
      c[j * ldc + i] = (accumulate ? c[j * ldc + i] : 0.0f) + tile[j * kMr + i];
    }
  }
}

}  // namespace

bool GemmSupports(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
}

size_t GemmWorkSize(int64_t m, int64_t n, int64_t k, int nth) {
  const Blocking bl = BlockingFor(m, n, k);
  // Per thread: an A block and one widened weight row segment.
  const size_t per_thread = APanelBytes(bl) + RoundUp(bl.kc * 4, kAlign);
  return kAlign + BPanelBytes(bl) + static_cast<size_t>(nth) * per_thread;
}

void GemmF32(const ComputeParams& p, void* work, int64_t m, int64_t n, int64_t k, const GemmA& a,
             const GemmB& b, const GemmC& c) {
  const Blocking bl = BlockingFor(m, n, k);
  char* base = AlignUp(work);
  float* bpack = reinterpret_cast<float*>(base);
  char* mine = base + BPanelBytes(bl) + p.ith * (APanelBytes(bl) + RoundUp(bl.kc * 4, kAlign));
  float* apack = reinterpret_cast<float*>(mine);
  float* row_tmp = reinterpret_cast<float*>(mine + APanelBytes(bl));
  const size_t ldc = c.row_stride / sizeof(float);

  // Split the M panels when there are enough for every thread, else the N panels.
  const int64_t m_panels = (m + kMr - 1) / kMr;
  const bool split_m = m_panels >= 2 * p.nth;
  int64_t mp0 = 0, mp1 = m_panels;
  if (split_m) SplitRange(m_panels, p.ith, p.nth, &mp0, &mp1);
  const int64_t m_begin = mp0 * kMr, m_end = std::min(m, mp1 * kMr);
  const int64_t mc_block = EvenBlock(std::max<int64_t>(m_end - m_begin, 1), kMc, kMr);

  for (int64_t jc = 0; jc < n; jc += bl.nc) {
    const int64_t nc = std::min(bl.nc, n - jc);
    const int64_t n_panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < k; pc += bl.kc) {
      const int64_t kc = std::min(bl.kc, k - pc);
      int64_t q0, q1;
      SplitRange(n_panels, p.ith, p.nth, &q0, &q1);
      for (int64_t q = q0; q < q1; ++q) {
        PackBPanel(b, n, jc + q * kNr, pc, kc, bpack + q * kc * kNr);
      }
      p.Sync();
      if (split_m) {
        q0 = 0;
        q1 = n_panels;
      } else {
        SplitRange(n_panels, p.ith, p.nth, &q0, &q1);
      }
      for (int64_t ic = m_begin; ic < m_end; ic += mc_block) {
        const int64_t mc = std::min(mc_block, m_end - ic);
        PackA(a, m, ic, mc, pc, kc, apack, row_tmp);
        for (int64_t q = q0; q < q1; ++q) {
          const int64_t col = jc + q * kNr;
          const int nr = static_cast<int>(std::min<int64_t>(kNr, n - col));
          for (int64_t ip = 0; ip < mc; ip += kMr) {
            const int mr = static_cast<int>(std::min<int64_t>(kMr, mc - ip));
            float* cp = c.data + col * ldc + ic + ip;
            const float* ap = apack + ip * kc;
            const float* bp = bpack + q * kc * kNr;
            if (mr == kMr && nr == kNr) {
              MicroKernel(kc, ap, bp, cp, ldc, pc > 0);
            } else {
              EdgeKernel(kc, ap, bp, cp, ldc, pc > 0, mr, nr);
            }
          }
        }
      }
      p.Sync();  // the next B block overwrites bpack.
    }
  }
}

}  // namespace tg::cpu
