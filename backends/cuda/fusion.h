// Which nodes of a graph a CUDA stream runs as one fused kernel, decided at dispatch on the
// placed graph (plain C++, unit-tested without a GPU):
//   RMS_NORM then MUL (the norm weight)   -> one kernel writing the MUL's result;
//   ROPE of Q and ROPE of K               -> one launch for both, at the later ROPE;
//   MUL_MAT gate, MUL_MAT up, SWIGLU      -> one matrix-vector kernel (decode) computing both
//                                            products of each row and writing silu(g) * u.
// A fusion leaves out the intermediate results, so it is taken only when nothing else reads
// them (not through a view either) and they are not graph outputs. Moving a ROPE later is
// taken only when no node in between reads its result or writes the memory it reads (the
// allocator may give a source's memory to a later node once its last reader has run: this
// is checked on the placed addresses). Every fused kernel computes each element with the
// same float operations as the separate kernels, so fused and unfused results are equal.
// Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_FUSION_H_
#define TENSORGRID_BACKENDS_CUDA_FUSION_H_

#include <cstdint>
#include <vector>

#include "core/graph.h"
#include "core/tensor.h"

namespace tg::cuda {

// How far apart (in nodes) the two ROPEs of a pair may be: Q's and K's projections and
// reshapes lie between them in a llama layer (about 6 nodes, 10 with Q/K norms).
inline constexpr int kMaxRopePairDistance = 16;

enum class FusionKind : uint8_t {
  kNone,          // the node runs alone.
  kSkip,          // the node is computed by a fused step at another index.
  kRmsNormMul,    // at the MUL: nodes = {norm, mul}.
  kRopePair,      // at the second ROPE: nodes = {first rope, second rope}.
  kGateUpSwiglu,  // at the SWIGLU: nodes = {gate mul_mat, up mul_mat, swiglu}.
};

struct FusedStep {
  FusionKind kind = FusionKind::kNone;
  Tensor* nodes[3] = {};
};

struct FusionOptions {
  bool enabled = true;
  // Gate/up fusion only for products of at most this many tokens (the matrix-vector kernel).
  int64_t max_gate_up_tokens = 8;
};

struct FusionPlan {
  std::vector<FusedStep> steps;  // one per graph node, in graph order.
  int n_fused = 0;               // fused steps (each replacing two or three nodes).
};

FusionPlan PlanFusions(const Graph& graph, const FusionOptions& options);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_FUSION_H_
