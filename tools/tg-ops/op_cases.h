// The catalogue of op test cases that `tg-ops test` runs on every device: what each case
// builds, which op it checks and how much error (NMSE) is acceptable for it.
#ifndef TENSORGRID_TOOLS_TG_OPS_OP_CASES_H_
#define TENSORGRID_TOOLS_TG_OPS_OP_CASES_H_

#include <string>
#include <vector>

#include "core/op.h"
#include "tools/tg-ops/op_runner.h"

namespace tg::ops_tool {

// NMSE thresholds. Each is about 10x above the largest error a correct backend may have:
// measured on the CPU backend against the f64 reference where that backend rounds the most,
// and otherwise estimated from the rounding docs/ops.md allows (u^2/3 for rounding to a
// format of unit roundoff u). Observed CPU values are noted; a real bug is >= 1e-3.
// Copies, gathers, views and single-rounding element-wise ops (observed: 0). Tight enough
// that converting F32 -> F16 by truncation instead of rounding (~3e-7) fails.
inline constexpr double kNmseExact = 1e-9;
// F32 ops with reductions or transcendentals: RMS_NORM, SOFT_MAX, ROPE, SILU, F32 MUL_MAT
// and F32 FLASH_ATTN (observed <= 1e-13; a backend computing angles or exp in f32 with
// fast approximations stays below ~1e-9).
inline constexpr double kNmseF32 = 1e-7;
// MUL_MAT / MUL_MAT_ID with F16 or BF16 weights, where backends may round the activations to
// the weight's type: F16 gives ~8e-8, BF16 ~5e-6 (the CPU backend does not round: ~1e-13).
inline constexpr double kNmseF16Weights = 1e-6;
inline constexpr double kNmseBf16Weights = 5e-5;
// Quantized weights: activations rounded to Q8_0 / Q8_K (observed 1.2e-5 .. 1.7e-5).
inline constexpr double kNmseQuantWeights = 2e-4;
// FLASH_ATTN with F16 K/V: q and the softmax weights may be rounded to F16 and V accumulated
// in F16 (~2e-5 at n_kv = 257; ggml's own bound is 5e-4). Observed on CPU: ~1e-13.
inline constexpr double kNmseF16Attention = 5e-4;
// Quantizing copies (F32 -> Q*, SET_ROWS into Q*): a kernel's quantizer may put a value that
// sits on a rounding boundary into the neighbouring quantum, ~2e-5 per such value in a Q4_0
// case; a few are tolerated (observed: 0).
inline constexpr double kNmseQuantize = 1e-4;

struct OpCase {
  Op op;             // the op under test (-o selects on it).
  std::string note;  // what is special about the case, shown in its description.
  double max_nmse;
  BuildFn build;
};

// Every case, grouped by op family, in a stable order.
std::vector<OpCase> TestCases();

// The node of `c.op` in a built case (the last one), or the output if there is none.
const Tensor* NodeUnderTest(const OpCase& c, const BuiltCase& built);

// "MUL_MAT(a=q4_0[256,67,1,1], b=f32[256,7,1,1], note)" from the case's node of `c.op`.
std::string DescribeCase(const OpCase& c, const BuiltCase& built);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_OP_CASES_H_
