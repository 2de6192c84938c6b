// CaseBuilder: creates the leafs of an op case (weights, activations, indices, masks) in a
// Context and remembers how each leaf's data is to be generated, so the same case can be
// built several times (once for the host reference, once per device) with identical data.
#ifndef TENSORGRID_TOOLS_TG_OPS_CASE_BUILDER_H_
#define TENSORGRID_TOOLS_TG_OPS_CASE_BUILDER_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context.h"
#include "core/tensor.h"

namespace tg::ops_tool {

// How a leaf's values are generated (as f32, then converted to the leaf's type).
struct Fill {
  enum class Kind {
    kUniform,          // uniform in [lo, hi).
    kIndices,          // integers in [0, n).
    kDistinctIndices,  // integers in [0, n), distinct within each row (dim 0).
    kMask,             // uniform in [lo, hi), a share of -inf, optionally one all -inf row.
    kCausalMask,       // row i: 0..n_kv-n+i uniform in [lo, hi), the rest -inf.
  };
  Kind kind = Kind::kUniform;
  float lo = -1.0f;
  float hi = 1.0f;
  int64_t n = 0;
  double inf_fraction = 0.0;
  int64_t masked_row = -1;  // kMask: index along dim 1 of the all -inf row, -1 for none.
};

struct Leaf {
  Tensor* tensor;
  Fill fill;
};

// The bytes of every leaf, in creation order, in the leaf's type and contiguous layout.
using LeafData = std::vector<std::vector<uint8_t>>;

class CaseBuilder {
 public:
  explicit CaseBuilder(Context& ctx) : ctx_(ctx) {}

  Context& ctx() { return ctx_; }
  const std::vector<Leaf>& leafs() const { return leafs_; }

  absl::StatusOr<Tensor*> Uniform(DType type, absl::Span<const int64_t> ne, float lo = -1.0f,
                                  float hi = 1.0f);
  // I32 values in [0, n): row picks, positions.
  absl::StatusOr<Tensor*> Indices(absl::Span<const int64_t> ne, int64_t n);
  // I32 values in [0, n), distinct along dim 0 (SET_ROWS targets, MoE expert choices).
  absl::StatusOr<Tensor*> DistinctIndices(absl::Span<const int64_t> ne, int64_t n);
  // An attention/softmax mask with a share of -inf entries and maybe one all -inf row.
  absl::StatusOr<Tensor*> Mask(DType type, absl::Span<const int64_t> ne, double inf_fraction,
                               int64_t masked_row = -1);
  // A causal mask for n_q queries at the end of ne[0] keys (rows past n_q stay finite).
  absl::StatusOr<Tensor*> CausalMask(DType type, absl::Span<const int64_t> ne, int64_t n_q);

 private:
  absl::StatusOr<Tensor*> NewLeaf(DType type, absl::Span<const int64_t> ne, const Fill& fill);

  Context& ctx_;
  std::vector<Leaf> leafs_;
};

// Generates the data of `leafs` from `seed`. Beyond `distinct_rows` rows, uniform leafs repeat
// their first rows (perf mode: quantizing hundreds of MB of weights would dominate the run).
LeafData GenerateLeafData(absl::Span<const Leaf> leafs, uint64_t seed,
                          int64_t distinct_rows = std::numeric_limits<int64_t>::max());

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_CASE_BUILDER_H_
