// FLASH_ATTN: fused softmax(scale * q k^T + mask) v with an online softmax (running max and
// sum, updated per block of keys), F32 or F16 K/V read as f32, GQA head broadcast. Query
// rows that share a KV head are processed in tiles so each K/V row is loaded once per tile.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_convert.h"
#include "backends/cpu/kernels/simd_math.h"

namespace tg::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kMaxTileRows = 16;  // query rows sharing each K/V row load.
constexpr int64_t kBlockKv = 32;      // keys per softmax update: staged K/V rows stay in L1.
constexpr int64_t kAlignFloats = 16;  // 64 bytes: scratch rows start on cache lines.

#if defined(TG_SIMD)
using simd::kLanes;
using simd::Load;
using simd::Set1;
using simd::Store;
using simd::VecF;
#endif

int64_t AlignFloats(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// out[t] = dot(q, k[t]) for 4 keys at once, sharing the q loads.
void Dot4(const float* q, const float* const* k, int64_t n, float* out) {
  int64_t i = 0;
  float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#if defined(TG_SIMD)
  VecF a0 = Set1(0.0f), a1 = Set1(0.0f), a2 = Set1(0.0f), a3 = Set1(0.0f);
  for (; i + kLanes <= n; i += kLanes) {
    const VecF qv = Load(q + i);
    a0 = simd::Fmadd(qv, Load(k[0] + i), a0);
    a1 = simd::Fmadd(qv, Load(k[1] + i), a1);
    a2 = simd::Fmadd(qv, Load(k[2] + i), a2);
    a3 = simd::Fmadd(qv, Load(k[3] + i), a3);
  }
  sum[0] = simd::ReduceAdd(a0);
  sum[1] = simd::ReduceAdd(a1);
  sum[2] = simd::ReduceAdd(a2);
  sum[3] = simd::ReduceAdd(a3);
#endif
  for (; i < n; ++i) {
    for (int t = 0; t < 4; ++t) sum[t] += q[i] * k[t][i];
  }
  for (int t = 0; t < 4; ++t) out[t] = sum[t];
}

float Dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(TG_SIMD)
  VecF acc = Set1(0.0f);
  for (; i + kLanes <= n; i += kLanes) acc = simd::Fmadd(Load(a + i), Load(b + i), acc);
  sum = simd::ReduceAdd(acc);
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// acc[0, n) += sum_a w[a] * v[a][0, n) over na rows; the accumulators stay in registers
// across rows, four vectors at a time for independent FMA chains.
void WeightedSum(float* acc, const float* w, const float* const* v, int64_t na, int64_t n) {
  int64_t c = 0;
#if defined(TG_SIMD)
  for (; c + 4 * kLanes <= n; c += 4 * kLanes) {
    VecF s0 = Load(acc + c), s1 = Load(acc + c + kLanes);
    VecF s2 = Load(acc + c + 2 * kLanes), s3 = Load(acc + c + 3 * kLanes);
    for (int64_t a = 0; a < na; ++a) {
      const VecF wa = Set1(w[a]);
      s0 = simd::Fmadd(wa, Load(v[a] + c), s0);
      s1 = simd::Fmadd(wa, Load(v[a] + c + kLanes), s1);
      s2 = simd::Fmadd(wa, Load(v[a] + c + 2 * kLanes), s2);
      s3 = simd::Fmadd(wa, Load(v[a] + c + 3 * kLanes), s3);
    }
    Store(acc + c, s0);
    Store(acc + c + kLanes, s1);
    Store(acc + c + 2 * kLanes, s2);
    Store(acc + c + 3 * kLanes, s3);
  }
  for (; c + kLanes <= n; c += kLanes) {
    VecF s0 = Load(acc + c);
    for (int64_t a = 0; a < na; ++a) s0 = simd::Fmadd(Set1(w[a]), Load(v[a] + c), s0);
    Store(acc + c, s0);
  }
#endif
  for (; c < n; ++c) {
    float s0 = acc[c];
    for (int64_t a = 0; a < na; ++a) s0 += w[a] * v[a][c];
    acc[c] = s0;
  }
}

// y *= a.
void Scale(float* y, float a, int64_t n) {
  int64_t i = 0;
#if defined(TG_SIMD)
  const VecF va = Set1(a);
  for (; i + kLanes <= n; i += kLanes) Store(y + i, simd::Mul(Load(y + i), va));
#endif
  for (; i < n; ++i) y[i] *= a;
}

float Max(const float* x, int64_t n) {
  float m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[i] = exp(x[i] - m); returns the sum. exp(-inf - m) is exactly 0.
float ExpSum(float* x, float m, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(TG_SIMD)
  const VecF vm = Set1(m);
  VecF acc = Set1(0.0f);
  for (; i + kLanes <= n; i += kLanes) {
    const VecF e = simd::Exp(simd::Sub(Load(x + i), vm));
    Store(x + i, e);
    acc = simd::Add(acc, e);
  }
  sum = simd::ReduceAdd(acc);
#endif
  for (; i < n; ++i) sum += x[i] = std::exp(x[i] - m);
  return sum;
}

// Sizes of the problem and of one thread's scratch (in floats).
struct Dims {
  int64_t d, dv, n_q, n_kv, n_head_kv, group;  // group: query heads per KV head.
  int64_t d_pad, dv_pad;

  explicit Dims(const Tensor& dst) {
    const Tensor& q = *dst.src[0];
    const Tensor& k = *dst.src[1];
    d = q.ne[0];
    n_q = q.ne[1];
    dv = dst.src[2]->ne[0];
    n_kv = k.ne[1];
    n_head_kv = k.ne[2];
    group = q.ne[2] / n_head_kv;
    d_pad = AlignFloats(d);
    dv_pad = AlignFloats(dv);
  }
  int64_t ScratchFloats() const {
    return kMaxTileRows * (d_pad + dv_pad + 2 * kBlockKv) + kBlockKv * (d_pad + dv_pad);
  }
};

// One thread's scratch: per tile row a q row, an output accumulator, a block of scores and
// of mask values; plus f32 staging for a block of K rows and of V rows.
struct Scratch {
  float* q;
  float* acc;
  float* s;
  float* mask;
  float* k_rows;
  float* v_rows;

  Scratch(const Dims& dims, float* base) {
    q = base;
    acc = q + kMaxTileRows * dims.d_pad;
    s = acc + kMaxTileRows * dims.dv_pad;
    mask = s + kMaxTileRows * kBlockKv;
    k_rows = mask + kMaxTileRows * kBlockKv;
    v_rows = k_rows + kBlockKv * dims.d_pad;
  }
};

// Query rows of one KV head and batch: row rho is position rho / group of head
// hk * group + rho % group.
struct Tile {
  int64_t b, hk, first, rows;
  int64_t Pos(int64_t r, const Dims& dims) const { return (first + r) / dims.group; }
  int64_t Head(int64_t r, const Dims& dims) const {
    return hk * dims.group + (first + r) % dims.group;
  }
};

// A block of keys: those of [j0, j0 + kBlockKv) that some row of the tile can see, in order.
struct KeyBlock {
  int64_t j0 = 0, n = 0;     // the range.
  int64_t na = 0;            // visible keys.
  int64_t idx[kBlockKv];     // their offsets from j0.
  const float* k[kBlockKv];  // their K rows and V rows as dense f32.
  const float* v[kBlockKv];
};

struct TileState {
  float m[kMaxTileRows];  // running max of each row's scores.
  float l[kMaxTileRows];  // running sum of exp(score - m).
};

class FlashAttn {
 public:
  FlashAttn(const Tensor& dst, const Dims& dims, const Scratch& s)
      : dst_(dst),
        q_(*dst.src[0]),
        k_(*dst.src[1]),
        v_(*dst.src[2]),
        mask_(dst.src[3]),
        dims_(dims),
        s_(s),
        scale_(dst.ParamF32(0)) {}

  void Run(const Tile& t) {
    TileState st;
    for (int64_t r = 0; r < t.rows; ++r) {
      const uint8_t* q_row =
          Base(q_) + t.Pos(r, dims_) * q_.nb[1] + t.Head(r, dims_) * q_.nb[2] + t.b * q_.nb[3];
      ConvertRow(q_.type, q_row, q_.nb[0], DType::kF32, Q(r), sizeof(float), dims_.d);
      std::fill(Acc(r), Acc(r) + dims_.dv, 0.0f);
      st.m[r] = kNegInf;
      st.l[r] = 0.0f;
    }
    KeyBlock kb;
    for (kb.j0 = 0; kb.j0 < dims_.n_kv; kb.j0 += kBlockKv) {
      kb.n = std::min(kBlockKv, dims_.n_kv - kb.j0);
      if (!FindVisibleKeys(t, &kb)) continue;
      Scores(t, &kb);
      UpdateSoftmax(t, kb, &st);
      for (int64_t a = 0; a < kb.na; ++a) {
        kb.v[a] = KvRow(v_, t, kb.j0 + kb.idx[a], s_.v_rows + a * dims_.dv_pad);
      }
      for (int64_t r = 0; r < t.rows; ++r) WeightedSum(Acc(r), S(r), kb.v, kb.na, dims_.dv);
    }
    for (int64_t r = 0; r < t.rows; ++r) {
      auto* out = reinterpret_cast<float*>(static_cast<uint8_t*>(dst_.data) +
                                           t.Head(r, dims_) * dst_.nb[1] +
                                           t.Pos(r, dims_) * dst_.nb[2] + t.b * dst_.nb[3]);
      const float inv = st.l[r] > 0.0f ? 1.0f / st.l[r] : 0.0f;  // fully masked: zeros.
      for (int64_t c = 0; c < dims_.dv; ++c) out[c] = Acc(r)[c] * inv;
    }
  }

 private:
  static const uint8_t* Base(const Tensor& t) { return static_cast<const uint8_t*>(t.data); }
  float* Q(int64_t r) const { return s_.q + r * dims_.d_pad; }
  float* Acc(int64_t r) const { return s_.acc + r * dims_.dv_pad; }
  float* S(int64_t r) const { return s_.s + r * kBlockKv; }
  float* M(int64_t r) const { return s_.mask + r * kBlockKv; }

  // Row j of K or V (of this tile's KV head) as dense f32: in place or staged.
  const float* KvRow(const Tensor& t, const Tile& tile, int64_t j, float* staging) const {
    const uint8_t* row = Base(t) + j * t.nb[1] + tile.hk * t.nb[2] + tile.b * t.nb[3];
    if (t.type == DType::kF32 && t.nb[0] == sizeof(float)) {
      return reinterpret_cast<const float*>(row);
    }
    ConvertRow(t.type, row, t.nb[0], DType::kF32, staging, sizeof(float), t.ne[0]);
    return staging;
  }

  // Reads the block's mask values and lists the keys not masked (-inf) for every row; masked
  // keys are never read, so stale K/V rows (even NaNs) behind a mask cannot leak in.
  bool FindVisibleKeys(const Tile& t, KeyBlock* kb) {
    kb->na = 0;
    if (mask_ == nullptr) {
      for (int64_t jj = 0; jj < kb->n; ++jj) kb->idx[kb->na++] = jj;
      return true;
    }
    for (int64_t r = 0; r < t.rows; ++r) {
      const uint8_t* m = Base(*mask_) + t.Pos(r, dims_) * mask_->nb[1] + kb->j0 * mask_->nb[0];
      ConvertRow(mask_->type, m, mask_->nb[0], DType::kF32, M(r), sizeof(float), kb->n);
    }
    for (int64_t jj = 0; jj < kb->n; ++jj) {
      bool visible = false;
      for (int64_t r = 0; r < t.rows; ++r) visible |= M(r)[jj] != kNegInf;
      if (visible) kb->idx[kb->na++] = jj;
    }
    return kb->na > 0;
  }

  // S[r][a] = scale * q_r . k_a + mask, or -inf where the mask hides key a from row r.
  void Scores(const Tile& t, KeyBlock* kb) {
    for (int64_t a = 0; a < kb->na; ++a) {
      kb->k[a] = KvRow(k_, t, kb->j0 + kb->idx[a], s_.k_rows + a * dims_.d_pad);
    }
    for (int64_t r = 0; r < t.rows; ++r) {
      float* s = S(r);
      int64_t a = 0;
      for (; a + 4 <= kb->na; a += 4) Dot4(Q(r), kb->k + a, dims_.d, s + a);
      for (; a < kb->na; ++a) s[a] = Dot(Q(r), kb->k[a], dims_.d);
      for (a = 0; a < kb->na; ++a) {
        const float m = mask_ != nullptr ? M(r)[kb->idx[a]] : 0.0f;
        s[a] = m == kNegInf ? kNegInf : s[a] * scale_ + m;
      }
    }
  }

  // Turns each row's scores into weights exp(s - m) under the updated running max m,
  // rescaling what the row accumulated so far.
  void UpdateSoftmax(const Tile& t, const KeyBlock& kb, TileState* st) {
    for (int64_t r = 0; r < t.rows; ++r) {
      const float block_max = Max(S(r), kb.na);
      if (block_max == kNegInf) {  // nothing visible to this row here: weights 0.
        std::fill(S(r), S(r) + kb.na, 0.0f);
        continue;
      }
      const float m = std::max(st->m[r], block_max);
      const float rescale = std::exp(st->m[r] - m);  // 0 on the first visible block.
      if (rescale != 1.0f) Scale(Acc(r), rescale, dims_.dv);
      st->l[r] = st->l[r] * rescale + ExpSum(S(r), m, kb.na);
      st->m[r] = m;
    }
  }

  const Tensor& dst_;
  const Tensor& q_;
  const Tensor& k_;
  const Tensor& v_;
  const Tensor* mask_;
  const Dims& dims_;
  const Scratch& s_;
  const float scale_;
};

}  // namespace

size_t FlashAttnWorkSize(const Tensor* dst, int nth) {
  return static_cast<size_t>(Dims(*dst).ScratchFloats()) * sizeof(float) * nth;
}

// Work is split over threads in tiles of query rows that share a KV head and batch. Tiles
// shrink (down to one row) when there would be fewer tiles than threads, e.g. in decoding.
void ComputeFlashAttn(const ComputeParams& p, Tensor* dst) {
  const Dims dims(*dst);
  const Scratch scratch(dims, static_cast<float*>(p.wdata) + dims.ScratchFloats() * p.ith);
  const int64_t rows_per_kv = dims.n_q * dims.group;
  const int64_t n_kv_heads = dims.n_head_kv * dst->src[0]->ne[3];
  const int64_t tile_rows =
      std::clamp<int64_t>(rows_per_kv * n_kv_heads / p.nth, 1, std::min(kMaxTileRows, rows_per_kv));
  const int64_t tiles_per_kv = (rows_per_kv + tile_rows - 1) / tile_rows;

  FlashAttn attn(*dst, dims, scratch);
  int64_t begin, end;
  SplitRange(tiles_per_kv * n_kv_heads, p.ith, p.nth, &begin, &end);
  for (int64_t i = begin; i < end; ++i) {
    const int64_t kv = i / tiles_per_kv;
    const int64_t first = (i % tiles_per_kv) * tile_rows;
    attn.Run(Tile{kv / dims.n_head_kv, kv % dims.n_head_kv, first,
                  std::min(tile_rows, rows_per_kv - first)});
  }
}

}  // namespace tg::cpu
