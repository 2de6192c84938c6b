// The shapes `tg-ops perf` times: llama-sized (4096-wide) matrix-vector products per weight
// type, a 1024^3 GEMM, activations of 512 tokens, attention over 1024 keys; and the work
// (flops, bytes moved) each one does, for the throughput columns.
#ifndef TENSORGRID_TOOLS_TG_OPS_PERF_CASES_H_
#define TENSORGRID_TOOLS_TG_OPS_PERF_CASES_H_

#include <string>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"
#include "tools/tg-ops/op_runner.h"

namespace tg::ops_tool {

struct PerfCase {
  Op op;
  std::string label;  // shape and types, for the table.
  BuildFn build;
};

std::vector<PerfCase> PerfCases();

// Floating-point operations of a node (0 for ops that are not counted in FLOPs).
double NodeFlops(const Tensor& node);
// Bytes a node reads and writes (only the rows it touches for GET_ROWS/SET_ROWS/MUL_MAT_ID).
double NodeBytes(const Tensor& node);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_PERF_CASES_H_
