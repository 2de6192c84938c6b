// Leaf creation and deterministic leaf data for op cases (see case_builder.h).
#include "tools/tg-ops/case_builder.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/quants.h"

namespace tg::ops_tool {
namespace {

// splitmix64: tiny, fast and identical on every platform (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  float Uniform(float lo, float hi) { return static_cast<float>(lo + (hi - lo) * Unit()); }
  int64_t Below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(Next() % n); }

 private:
  uint64_t state_;
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Fills `row` (ne0 values) of leaf row `r` (flat index over dims 1..3) according to `fill`.
void FillRow(const Tensor& t, const Fill& fill, int64_t r, Rng& rng, std::vector<float>& row) {
  const int64_t ne0 = t.ne[0];
  const int64_t i1 = r % t.ne[1];
  switch (fill.kind) {
    case Fill::Kind::kUniform:
      for (float& v : row) v = rng.Uniform(fill.lo, fill.hi);
      return;
    case Fill::Kind::kIndices:
      for (float& v : row) v = static_cast<float>(rng.Below(fill.n));
      return;
    case Fill::Kind::kDistinctIndices: {
      // Partial Fisher-Yates over [0, n): the first ne0 picks are distinct.
      std::vector<int64_t> pool(fill.n);
      std::iota(pool.begin(), pool.end(), 0);
      for (int64_t i = 0; i < ne0 && i < fill.n; ++i) {
        std::swap(pool[i], pool[i + rng.Below(fill.n - i)]);
        row[i] = static_cast<float>(pool[i]);
      }
      return;
    }
    case Fill::Kind::kMask:
      for (float& v : row) {
        v = rng.Unit() < fill.inf_fraction ? kNegInf : rng.Uniform(fill.lo, fill.hi);
      }
      if (i1 == fill.masked_row) std::fill(row.begin(), row.end(), kNegInf);
      return;
    case Fill::Kind::kCausalMask:
      for (int64_t j = 0; j < ne0; ++j) {
        const bool visible = i1 >= fill.n || j <= ne0 - fill.n + i1;
        row[j] = visible ? rng.Uniform(fill.lo, fill.hi) : kNegInf;
      }
      return;
  }
}

std::vector<uint8_t> LeafBytes(const Leaf& leaf, Rng& rng, int64_t distinct_rows) {
  const Tensor& t = *leaf.tensor;
  const size_t row_bytes = t.RowBytes();
  const int64_t rows = t.NumRows();
  std::vector<uint8_t> bytes(row_bytes * rows);
  std::vector<float> row(t.ne[0]);
  const bool may_repeat = leaf.fill.kind == Fill::Kind::kUniform;
  for (int64_t r = 0; r < rows; ++r) {
    if (may_repeat && r >= distinct_rows) {
      std::memcpy(&bytes[r * row_bytes], &bytes[(r % distinct_rows) * row_bytes], row_bytes);
      continue;
    }
    FillRow(t, leaf.fill, r, rng, row);
    QuantizeRow(t.type, row.data(), &bytes[r * row_bytes], t.ne[0]);
  }
  return bytes;
}

}  // namespace

absl::StatusOr<Tensor*> CaseBuilder::NewLeaf(DType type, absl::Span<const int64_t> ne,
                                             const Fill& fill) {
  absl::StatusOr<Tensor*> t = ctx_.NewTensor(type, ne);
  if (!t.ok()) return t.status();
  (*t)->SetName("leaf");
  leafs_.push_back({*t, fill});
  return *t;
}

absl::StatusOr<Tensor*> CaseBuilder::Uniform(DType type, absl::Span<const int64_t> ne, float lo,
                                             float hi) {
  Fill fill;
  fill.lo = lo;
  fill.hi = hi;
  return NewLeaf(type, ne, fill);
}

absl::StatusOr<Tensor*> CaseBuilder::Indices(absl::Span<const int64_t> ne, int64_t n) {
  Fill fill;
  fill.kind = Fill::Kind::kIndices;
  fill.n = n;
  return NewLeaf(DType::kI32, ne, fill);
}

absl::StatusOr<Tensor*> CaseBuilder::DistinctIndices(absl::Span<const int64_t> ne, int64_t n) {
  if (ne.empty() || ne[0] > n) {
    return absl::InvalidArgumentError("DistinctIndices: a row is longer than the value range");
  }
  Fill fill;
  fill.kind = Fill::Kind::kDistinctIndices;
  fill.n = n;
  return NewLeaf(DType::kI32, ne, fill);
}

absl::StatusOr<Tensor*> CaseBuilder::Mask(DType type, absl::Span<const int64_t> ne,
                                          double inf_fraction, int64_t masked_row) {
  Fill fill;
  fill.kind = Fill::Kind::kMask;
  fill.inf_fraction = inf_fraction;
  fill.masked_row = masked_row;
  return NewLeaf(type, ne, fill);
}

absl::StatusOr<Tensor*> CaseBuilder::CausalMask(DType type, absl::Span<const int64_t> ne,
                                                int64_t n_q) {
  Fill fill;
  fill.kind = Fill::Kind::kCausalMask;
  fill.n = n_q;
  return NewLeaf(type, ne, fill);
}

LeafData GenerateLeafData(absl::Span<const Leaf> leafs, uint64_t seed, int64_t distinct_rows) {
  Rng rng(seed);
  LeafData data;
  data.reserve(leafs.size());
  for (const Leaf& leaf : leafs) data.push_back(LeafBytes(leaf, rng, distinct_rows));
  return data;
}

}  // namespace tg::ops_tool
