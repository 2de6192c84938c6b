#include "backends/cuda/fusion.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "backends/cuda/graph_capture.h"
#include "backends/cuda/kernel_types.h"

namespace tg::cuda {
namespace {

const Tensor* Owner(const Tensor* t) {
  while (t->view_src != nullptr) t = t->view_src;
  return t;
}

struct Range {
  uintptr_t begin = 0, end = 0;
};

Range RangeOf(const Tensor& t) {
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + t.NumBytes()};
}

bool Overlap(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

// Readers per memory owner: how many source slots of compute nodes read it (via any view).
using Readers = absl::flat_hash_map<const Tensor*, int>;

Readers CountReaders(const Graph& graph) {
  Readers readers;
  readers.reserve(graph.nodes.size());
  for (const Tensor* node : graph.nodes) {
    if (!LaunchesWork(*node)) continue;
    for (const Tensor* s : node->src) {
      if (s != nullptr) ++readers[Owner(s)];
    }
  }
  return readers;
}

// An intermediate result nobody but its one consumer reads.
bool Private(const Tensor& t, const Readers& readers) {
  if (t.HasFlag(kFlagOutput) || t.IsView()) return false;
  auto it = readers.find(&t);
  return it != readers.end() && it->second == 1;
}

// The next node after i that launches work (graph.nodes.size() if none).
size_t NextCompute(const Graph& graph, size_t i) {
  for (++i; i < graph.nodes.size(); ++i) {
    if (LaunchesWork(*graph.nodes[i])) return i;
  }
  return i;
}

bool RmsNormMul(const Tensor& norm, const Tensor& mul, const Readers& readers) {
  if (norm.op != Op::kRmsNorm || mul.op != Op::kMul || mul.src[0] != &norm) return false;
  if (mul.type != DType::kF32 || mul.src[1]->type != DType::kF32) return false;
  if (!Private(norm, readers)) return false;
  // The fused kernel reads x and the weight while writing the MUL's result.
  const Range out = RangeOf(mul);
  return !Overlap(out, RangeOf(*norm.src[0])) && !Overlap(out, RangeOf(*mul.src[1]));
}

bool SameRope(const Tensor& a, const Tensor& b) {
  return b.op == Op::kRope && a.type == DType::kF32 && b.type == DType::kF32 &&
         a.src[1] == b.src[1] && a.src[2] == b.src[2] &&
         std::memcmp(a.op_params, b.op_params, sizeof(a.op_params)) == 0;
}

// ROPE `first` (node i) may run at node j instead: nothing in between reads its result or
// writes what it reads.
bool Deferrable(const Graph& graph, size_t i, size_t j) {
  const Tensor& first = *graph.nodes[i];
  const Range out = RangeOf(first);
  Range reads[kMaxSrc];
  int n_reads = 0;
  for (const Tensor* s : first.src) {
    if (s != nullptr) reads[n_reads++] = RangeOf(*s);
  }
  for (size_t k = i + 1; k < j; ++k) {
    const Tensor& mid = *graph.nodes[k];
    if (!LaunchesWork(mid)) continue;
    const Range written = RangeOf(mid);
    if (Overlap(written, out)) return false;
    for (int r = 0; r < n_reads; ++r) {
      if (Overlap(written, reads[r])) return false;
    }
    for (const Tensor* s : mid.src) {
      if (s != nullptr && (Owner(s) == &first || Overlap(RangeOf(*s), out))) return false;
    }
  }
  return true;
}

bool GateUpSwiglu(const Tensor& gate, const Tensor& up, const Tensor& swiglu,
                  const Readers& readers, const FusionOptions& options) {
  if (gate.op != Op::kMulMat || up.op != Op::kMulMat || swiglu.op != Op::kSwiglu) return false;
  if (swiglu.src[0] != &gate || swiglu.src[1] != &up || gate.src[1] != up.src[1]) return false;
  const Tensor& wg = *gate.src[0];
  const Tensor& wu = *up.src[0];
  const Tensor& act = *gate.src[1];
  // Quantized weights only: their activations are quantized into scratch first, so the fused
  // kernel never reads memory the SWIGLU result may occupy.
  if (wg.type != wu.type || !IsQuantizedType(static_cast<int>(wg.type))) return false;
  for (int d = 0; d < kMaxDims; ++d) {
    if (wg.ne[d] != wu.ne[d] || wg.nb[d] != wu.nb[d]) return false;
  }
  if (wg.ne[2] != 1 || wg.ne[3] != 1 || act.ne[2] != 1 || act.ne[3] != 1) return false;
  if (act.ne[1] > options.max_gate_up_tokens || !wg.RowsContiguous()) return false;
  if (!SameShape(gate, swiglu) || !swiglu.IsContiguous() || swiglu.type != DType::kF32) {
    return false;
  }
  return Private(gate, readers) && Private(up, readers);
}

}  // namespace

FusionPlan PlanFusions(const Graph& graph, const FusionOptions& options) {
  FusionPlan plan;
  const size_t n = graph.nodes.size();
  plan.steps.resize(n);
  if (!options.enabled) return plan;
  const Readers readers = CountReaders(graph);
  auto free_at = [&](size_t k) { return plan.steps[k].kind == FusionKind::kNone; };
  for (size_t i = 0; i < n; ++i) {
    Tensor* node = graph.nodes[i];
    if (!LaunchesWork(*node) || !free_at(i)) continue;
    const size_t next = NextCompute(graph, i);
    if (node->op == Op::kRmsNorm && next < n && free_at(next) &&
        RmsNormMul(*node, *graph.nodes[next], readers)) {
      plan.steps[i].kind = FusionKind::kSkip;
      plan.steps[next] = {FusionKind::kRmsNormMul, {node, graph.nodes[next]}};
      ++plan.n_fused;
      continue;
    }
    if (node->op == Op::kRope) {
      const size_t last = std::min(n, i + 1 + kMaxRopePairDistance);
      for (size_t j = i + 1; j < last; ++j) {
        Tensor* other = graph.nodes[j];
        if (!LaunchesWork(*other) || !free_at(j) || !SameRope(*node, *other)) continue;
        if (Deferrable(graph, i, j)) {
          plan.steps[i].kind = FusionKind::kSkip;
          plan.steps[j] = {FusionKind::kRopePair, {node, other}};
          ++plan.n_fused;
        }
        break;  // only the nearest matching ROPE is considered.
      }
      continue;
    }
    if (node->op == Op::kMulMat && next < n && free_at(next)) {
      const size_t third = NextCompute(graph, next);
      Tensor* swiglu = third < n ? graph.nodes[third] : nullptr;
      // The two products may come in either order.
      if (swiglu != nullptr && free_at(third) && swiglu->op == Op::kSwiglu &&
          ((swiglu->src[0] == node && swiglu->src[1] == graph.nodes[next]) ||
           (swiglu->src[1] == node && swiglu->src[0] == graph.nodes[next])) &&
          GateUpSwiglu(*swiglu->src[0], *swiglu->src[1], *swiglu, readers, options)) {
        plan.steps[i].kind = FusionKind::kSkip;
        plan.steps[next].kind = FusionKind::kSkip;
        plan.steps[third] = {FusionKind::kGateUpSwiglu, {swiglu->src[0], swiglu->src[1], swiglu}};
        ++plan.n_fused;
      }
    }
  }
  return plan;
}

}  // namespace tg::cuda
