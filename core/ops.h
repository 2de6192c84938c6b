// Graph builder: one function per op. Each checks its operands with the op's shape rule
// (core/shape_rules.h) and returns the new node, or INVALID_ARGUMENT naming what is wrong;
// nothing here aborts. Nodes are created in `ctx`; no data is touched (see docs/ops.md).
#ifndef TENSORGRID_CORE_OPS_H_
#define TENSORGRID_CORE_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context.h"
#include "core/tensor.h"

namespace tg {

using TensorOr = absl::StatusOr<Tensor*>;

// ROPE parameters (op_params slots 0..8, see docs/ops.md).
struct RopeParams {
  int32_t n_dims = 0;
  int32_t mode = 0;  // kRopeNormal or kRopeNeox.
  int32_t n_ctx_orig = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;  // YaRN extrapolation mix; 0 disables YaRN.
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};
inline constexpr int32_t kRopeNormal = 0;
inline constexpr int32_t kRopeNeox = 2;
// The parameters a ROPE node was built with (Rope's op_params read back; kernels use this).
RopeParams RopeParamsOf(const Tensor& rope);
// YaRN's ramp between interpolated and extrapolated frequencies runs over the pairs [lo, hi]:
// ggml_rope_yarn_corr_dims at beta_fast and beta_slow, floored/ceiled into [0, n_dims - 1].
struct YarnRamp {
  double lo = 0;
  double hi = 0;
};
YarnRamp YarnRampOf(const RopeParams& p);
// The scale of ROPE's output: attn_factor, times YaRN's 1 + 0.1 ln(1 / freq_scale) when YaRN
// is on (ext_factor != 0); computed in double and rounded once.
float RopeMscaleOf(const RopeParams& p);

// SAMPLE parameters (op_params: 0 f32 temperature, 1 top_k, 2 f32 top_p, 3 f32 min_p,
// 4 f32 repeat_penalty, 5 and 6 the seed's low and high 32 bits; see docs/ops.md).
// Defaults are llama.cpp's.
struct SampleParams {
  float temperature = 0.8f;     // <= 0: the largest logit (ARGMAX's pick), no draw.
  int32_t top_k = 40;           // 0: every id.
  float top_p = 0.95f;          // 1: no nucleus cut.
  float min_p = 0.05f;          // 0: no cut.
  float repeat_penalty = 1.0f;  // 1: no penalty.
  uint64_t seed = 0;

  friend bool operator==(const SampleParams&, const SampleParams&) = default;
};
// The parameters a SAMPLE node was built with (Sample's op_params read back).
SampleParams SampleParamsOf(const Tensor& sample);

TensorOr GetRows(Context& ctx, Tensor* a, Tensor* idx);
TensorOr SetRows(Context& ctx, Tensor* dst, Tensor* rows, Tensor* idx);
TensorOr MulMat(Context& ctx, Tensor* a, Tensor* b);
// expert_count > 0: `experts` holds experts [first_expert, first_expert + expert_count) of
// the ids' numbering (expert parallelism); rows of other ids are zeros.
TensorOr MulMatId(Context& ctx, Tensor* experts, Tensor* b, Tensor* ids, int32_t first_expert = 0,
                  int32_t expert_count = 0);
TensorOr Add(Context& ctx, Tensor* a, Tensor* b);
TensorOr Mul(Context& ctx, Tensor* a, Tensor* b);
TensorOr Scale(Context& ctx, Tensor* a, float scale, float bias = 0.0f);
TensorOr RmsNorm(Context& ctx, Tensor* a, float eps);
TensorOr Rope(Context& ctx, Tensor* a, Tensor* pos, Tensor* freq_factors, const RopeParams& p);
// `sinks` (optional, F32 [a.ne[2]]): per head, a logit that joins each row's softmax and is
// dropped from the result (gpt-oss's attention sinks).
TensorOr SoftMax(Context& ctx, Tensor* a, Tensor* mask, float scale, Tensor* sinks = nullptr);
TensorOr Silu(Context& ctx, Tensor* a);
TensorOr Swiglu(Context& ctx, Tensor* gate, Tensor* up);
// gpt-oss's clamped SwiGLU (ggml's swiglu_oai): x = min(gate, limit), y = clamp(up, -limit,
// limit), x * sigmoid(alpha * x) * (y + 1). gpt-oss uses alpha 1.702, limit 7.
TensorOr SwigluOai(Context& ctx, Tensor* gate, Tensor* up, float alpha, float limit);
// I32 [1, ne1, ne2, ne3]: per row of F32 `a`, the index of its largest value (greedy pick).
TensorOr Argmax(Context& ctx, Tensor* a);
// I32 [1, ne1, ne2, ne3]: per row of F32 `logits`, a token id drawn as docs/ops.md says,
// with the generator's counter at that row's position (`pos`: I32, one per row). `recent`
// (optional, I32 [W]) holds the tokens the repetition penalty applies to.
TensorOr Sample(Context& ctx, Tensor* logits, Tensor* pos, Tensor* recent, const SampleParams& p);
// ARGSORT's op_params[0] (ggml's GGML_SORT_ORDER values).
enum class SortOrder : int32_t { kAscending = 0, kDescending = 1 };
// I32 of a's shape: per F32 row, the indices that sort it; equal values keep index order and
// NaN comes last in either order.
TensorOr Argsort(Context& ctx, Tensor* a, SortOrder order);
// I32 [k, ne1, ne2, ne3]: per F32 row of `a`, the indices of its k largest values, largest
// first (ARGSORT descending's first k; 1 <= k <= ne0). The MoE router's expert choice.
TensorOr TopK(Context& ctx, Tensor* a, int64_t k);
// F32 [1, ne1, ne2, ne3]: the sum of each row of F32 `a`.
TensorOr SumRows(Context& ctx, Tensor* a);
// a / b element-wise, b broadcast over a as in ADD and MUL.
TensorOr Div(Context& ctx, Tensor* a, Tensor* b);
TensorOr Cpy(Context& ctx, Tensor* a, Tensor* b);
TensorOr Cont(Context& ctx, Tensor* a);
// A view of `a` with shape ne (1 to 4 dims), strides nb for dims 1.. (nb[0] is the element
// size), starting `offset` bytes into a.
TensorOr View(Context& ctx, Tensor* a, absl::Span<const int64_t> ne,
              absl::Span<const size_t> nb_upper, size_t offset);
TensorOr Reshape(Context& ctx, Tensor* a, absl::Span<const int64_t> ne);
TensorOr Permute(Context& ctx, Tensor* a, int ax0, int ax1, int ax2, int ax3);
TensorOr Transpose(Context& ctx, Tensor* a);
TensorOr FlashAttn(Context& ctx, Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale);

// Creates a node of `op` with the given sources and params after checking the op's rule:
// the one path through which every builder above (and deserializers) make nodes.
TensorOr MakeNode(Context& ctx, Op op, absl::Span<Tensor* const> src,
                  absl::Span<const int32_t> params = {});

}  // namespace tg

#endif  // TENSORGRID_CORE_OPS_H_
