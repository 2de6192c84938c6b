// The operation set of tensorgrid graphs, with the layout of each op's parameters.
#ifndef TENSORGRID_CORE_OP_H_
#define TENSORGRID_CORE_OP_H_

#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace tg {

// Stable numbering: the RPC protocol and the op-table fingerprint use these values.
// op_params layout (int32 slots; floats are bit-cast into a slot) is noted per op.
enum class Op : uint8_t {
  kNone = 0,      // a leaf: weight, input or constant.
  kGetRows = 1,   // dst[.., r, ..] = src0 rows picked by src1 (I32 indices) -> F32.
  kSetRows = 2,   // dst aliases src0; writes F32 rows of src1 into src0 at rows src2 (I32).
  kMulMat = 3,    // dst[M,N,..] = src0[K,M,..] x src1[K,N,..]; src0 broadcast over dims 2,3.
  kAdd = 4,       // dst = src0 + src1 (src1 broadcast).
  kMul = 5,       // dst = src0 * src1 (src1 broadcast).
  kScale = 6,     // dst = src0 * p[0] + p[1]      params: f32 scale, f32 bias.
  kRmsNorm = 7,   // dst = src0 / sqrt(mean(src0^2) + eps) per row   params: f32 eps.
  kRope = 8,      // rotary embedding   params: see RopeParams in ops.h.
  kSoftMax = 9,   // dst = softmax(src0 * scale + src1 (mask, optional))   params: f32 scale.
  kSilu = 10,     // dst = x * sigmoid(x).
  kSwiglu = 11,   // dst = silu(src0) * src1.
  kCpy = 12,      // writes src0 converted into src1's type/layout; dst is a view of src1.
  kCont = 13,     // dst = contiguous copy of src0 (same type).
  kView = 14,     // dst aliases src0's data at view_offs with its own ne/nb.
  kReshape = 15,  // dst aliases contiguous src0 with a new shape.
  kPermute = 16,  // dst aliases src0 with permuted axes   params: axis[4].
  kTranspose = 17,  // dst aliases src0 with axes 0 and 1 swapped.
  kFlashAttn = 18,  // fused attention: q, k, v, mask(optional)   params: f32 scale.
  kMulMatId = 19,   // MoE: src0 experts [K,M,E], src1 [K,n_used|1,T], src2 ids I32 [n_used,T].
                    // params: first expert, expert count (0: off; else src0 holds experts
                    // [first, first + count) and other ids give zero rows).
  kArgmax = 20,     // dst I32 [1, ne1, ..]: index of each F32 row's largest value (the first
                    // on ties; NaN never wins; a row of NaN only gives 0).
  kSample = 21,     // dst I32 [1, ne1, ..]: a token id drawn from each F32 row of logits with
                    // a counter-based generator of (seed, position); sources: logits,
                    // positions I32 [rows], recent tokens I32 [W] (optional, the repetition
                    // penalty's window)   params: see SampleParams in ops.h.
  kArgsort = 22,    // dst I32, src0's shape: per F32 row, the indices that sort it (stable:
                    // equal values keep index order; NaN last)   params: order (0 asc, 1 desc).
  kTopK = 23,       // dst I32 [k, ne1, ..]: per F32 row, the indices of its k largest values,
                    // largest first (ARGSORT descending's first k)   params: k.
  kSumRows = 24,    // dst F32 [1, ne1, ..]: the sum of each F32 row.
  kDiv = 25,        // dst = src0 / src1 (src1 broadcast).
  kSwigluOai = 26,  // gpt-oss's clamped SwiGLU (ggml's swiglu_oai): x = min(src0, limit),
                    // y = clamp(src1, -limit, limit), dst = x * sigmoid(alpha * x) * (y + 1)
                    // params: f32 alpha, f32 limit.
  kCount = 27,
};

// MUL_MAT_ID's op_params slots (expert parallelism: a device holding some of the experts).
inline constexpr int kMulMatIdFirstExpert = 0;
inline constexpr int kMulMatIdExpertCount = 1;
// SWIGLU_OAI's op_params slots.
inline constexpr int kSwigluOaiAlpha = 0;
inline constexpr int kSwigluOaiLimit = 1;

absl::string_view OpName(Op op);           // "MUL_MAT"
absl::StatusOr<Op> ParseOp(absl::string_view name);  // case-insensitive; error names the op.
// True for ops that only alias their source (no compute, no memory of their own).
bool IsViewOp(Op op);

// Identifies this build's op table (names, numbering, op_params revision): the RPC
// handshake refuses a peer whose fingerprint differs. Bump kOpParamsRevision in op.cc
// whenever an op's parameter layout or semantics change.
uint64_t OpTableFingerprint();

}  // namespace tg

#endif  // TENSORGRID_CORE_OP_H_
