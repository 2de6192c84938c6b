// MUL_MAT and MUL_MAT_ID cases: every weight type, odd sizes, decode batches of several
// sequences (alone and in the fused q/k/v and gate/up groups), broadcasting over dims 2/3,
// non-contiguous operands and GEMM-sized batches.
#include <string>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "tools/tg-ops/case_helpers.h"

namespace tg::ops_tool {
namespace {

// What MUL_MAT may round the activations to decides the achievable accuracy (docs/ops.md).
double WeightNmse(DType type) {
  switch (type) {
    case DType::kF32:
      return kNmseF32;
    case DType::kF16:
      return kNmseF16Weights;
    case DType::kBF16:
      return kNmseBf16Weights;
    default:
      return kNmseQuantWeights;
  }
}

// Plain a[K, M, a2, a3] x b[K, N, b2, b3].
OpCase MulMatCase(DType type, Shape4 a_ne, Shape4 b_ne, std::string note = "") {
  return {Op::kMulMat, std::move(note), WeightNmse(type), [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, b.Uniform(type, a_ne));
            TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, b_ne));
            return MulMat(b.ctx(), a, x);
          }};
}

void AddWeightTypeCases(std::vector<OpCase>* cases) {
  constexpr int64_t kOddM = 67;
  constexpr int64_t kSmallM = 16;
  constexpr int64_t kBatchN = 33;
  for (DType type : kWeightTypes) {
    const int64_t k = OddRowLength(type);
    cases->push_back(MulMatCase(type, {k, kOddM, 1, 1}, {k, 1, 1, 1}, "matvec"));
    cases->push_back(MulMatCase(type, {k, kOddM, 1, 1}, {k, 7, 1, 1}));
    cases->push_back(MulMatCase(type, {k, kSmallM, 1, 1}, {k, kBatchN, 1, 1}));
  }
}

// Decode steps of several sequences, one activation column each: the matrix-vector kernels
// take up to 16 columns per workgroup (rounded up to a power of two), so these cover a
// single column, full and partly filled groups, and the largest group.
constexpr int64_t kSequenceCounts[] = {1, 2, 3, 4, 8, 9, 16};

void AddSequenceBatchCases(std::vector<OpCase>* cases) {
  constexpr int64_t kRows = 37;  // odd: the last workgroup of rows is partly filled.
  for (DType type : kWeightTypes) {
    const int64_t k = OddRowLength(type);
    for (int64_t n : kSequenceCounts) {
      if (n == 1) continue;  // AddWeightTypeCases' "matvec".
      cases->push_back(
          MulMatCase(type, {k, kRows, 1, 1}, {k, n, 1, 1}, absl::StrCat(n, " sequences")));
    }
  }
}

// A layer's q, k and v projections of one input, and its gate/up/SWIGLU, summed into one
// result: the devices that fuse these groups (the Vulkan backend) run them as one kernel
// each. Rows of 62 put the matrices' seams inside workgroups of rows.
OpCase FusedProjectionsCase(DType type, int64_t n) {
  constexpr int64_t kRows = 62;
  const int64_t k = OddRowLength(type);
  return {Op::kMulMat, absl::StrCat("q/k/v and gate/up of ", n, " sequences"), WeightNmse(type),
          [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, {k, n}));
            Tensor* w[5];
            for (Tensor*& t : w) {
              TG_ASSIGN_OR_RETURN(t, b.Uniform(type, {k, kRows}));
            }
            Context& ctx = b.ctx();
            Tensor* out[5];
            for (int i = 0; i < 5; ++i) {
              TG_ASSIGN_OR_RETURN(out[i], MulMat(ctx, w[i], x));
            }
            TG_ASSIGN_OR_RETURN(Tensor * act, Swiglu(ctx, out[3], out[4]));
            TG_ASSIGN_OR_RETURN(Tensor * qk, Add(ctx, out[0], out[1]));
            TG_ASSIGN_OR_RETURN(Tensor * qkv, Add(ctx, qk, out[2]));
            return Add(ctx, qkv, act);
          }};
}

void AddFusedCases(std::vector<OpCase>* cases) {
  for (DType type : {DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    for (int64_t n : kSequenceCounts) cases->push_back(FusedProjectionsCase(type, n));
  }
}

void AddShapeCases(std::vector<OpCase>* cases) {
  // Degenerate inner sizes.
  cases->push_back(MulMatCase(DType::kF32, {1, 5, 1, 1}, {1, 3, 1, 1}));
  cases->push_back(MulMatCase(DType::kF16, {3, 4, 1, 1}, {3, 2, 1, 1}));
  cases->push_back(MulMatCase(DType::kF32, {67, 3, 1, 1}, {67, 1, 1, 1}));
  // Broadcasting the weight over dims 2 and 3.
  cases->push_back(MulMatCase(DType::kF32, {64, 16, 2, 1}, {64, 5, 4, 3}, "broadcast"));
  cases->push_back(MulMatCase(DType::kF16, {64, 16, 2, 3}, {64, 5, 4, 3}, "broadcast"));
  cases->push_back(MulMatCase(DType::kQ8_0, {64, 16, 1, 1}, {64, 3, 2, 2}, "broadcast"));
  cases->push_back(MulMatCase(DType::kQ4_K, {256, 8, 2, 1}, {256, 3, 4, 1}, "broadcast"));
  // GEMM-sized batches (the kernels' tiled paths).
  cases->push_back(MulMatCase(DType::kF32, {256, 128, 1, 1}, {256, 64, 1, 1}, "gemm"));
  cases->push_back(MulMatCase(DType::kF16, {256, 128, 1, 1}, {256, 64, 1, 1}, "gemm"));
  cases->push_back(MulMatCase(DType::kQ4_0, {256, 128, 1, 1}, {256, 64, 1, 1}, "gemm"));
  cases->push_back(MulMatCase(DType::kQ4_K, {256, 96, 1, 1}, {256, 40, 1, 1}, "gemm"));
  cases->push_back(MulMatCase(DType::kQ5_1, {256, 96, 1, 1}, {256, 40, 1, 1}, "gemm"));
  cases->push_back(MulMatCase(DType::kIQ4_NL, {256, 96, 1, 1}, {256, 40, 1, 1}, "gemm"));
}

// a[K, M] x (b transposed | b with padded rows), and a weight with permuted dims 2/3.
void AddStridedCases(std::vector<OpCase>* cases) {
  struct Strided {
    DType type;
    Shape4 a_ne;
    Shape4 b_ne;
    int kind;  // 0: b transposed, 1: b padded rows, 2: a permuted.
  };
  const Strided specs[] = {
      {DType::kF32, {67, 9, 1, 1}, {67, 5, 1, 1}, 0},
      {DType::kQ4_0, {64, 9, 1, 1}, {64, 5, 1, 1}, 0},
      {DType::kQ6_K, {256, 8, 1, 1}, {256, 3, 2, 1}, 1},
      {DType::kF16, {64, 16, 3, 2}, {64, 5, 3, 2}, 2},
      {DType::kQ4_0, {64, 16, 3, 2}, {64, 2, 3, 2}, 2},
      {DType::kMXFP4, {64, 16, 3, 2}, {64, 2, 3, 2}, 2},  // 17-byte blocks: odd strides.
  };
  const char* notes[] = {"b transposed", "b padded rows", "a permuted"};
  for (const Strided& s : specs) {
    cases->push_back(
        {Op::kMulMat, notes[s.kind], WeightNmse(s.type), [s](CaseBuilder& b) -> TensorOr {
           TensorOr a = s.kind == 2 ? PermutedLeaf(b, s.type, s.a_ne) : b.Uniform(s.type, s.a_ne);
           if (!a.ok()) return a.status();
           TensorOr x = s.kind == 0   ? TransposedLeaf(b, DType::kF32, s.b_ne)
                        : s.kind == 1 ? PaddedRowsLeaf(b, DType::kF32, s.b_ne)
                                      : b.Uniform(DType::kF32, s.b_ne);
           if (!x.ok()) return x.status();
           return MulMat(b.ctx(), *a, *x);
         }});
  }
}

// experts[K, M, E] x b[K, n_b1, T] with ids[n_used, T] (n_b1 = n_used or 1).
OpCase MulMatIdCase(DType type, int64_t k, int64_t m, int64_t n_experts, int64_t n_used,
                    int64_t tokens, bool shared_b) {
  std::string note =
      absl::StrCat("E=", n_experts, ", n_used=", n_used, shared_b ? ", one b row per token" : "");
  return {
      Op::kMulMatId, note, WeightNmse(type), [=](CaseBuilder& b) -> TensorOr {
        TG_ASSIGN_OR_RETURN(Tensor * as, b.Uniform(type, {k, m, n_experts}));
        TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, {k, shared_b ? 1 : n_used, tokens}));
        TG_ASSIGN_OR_RETURN(Tensor * ids, b.DistinctIndices({n_used, tokens}, n_experts));
        return MulMatId(b.ctx(), as, x, ids);
      }};
}

// Expert parallelism: the weights hold `count` of `n_total` experts from `first` on; the
// ids pick among all of them, so some rows are computed and the others must be zeros.
OpCase MulMatIdRangeCase(DType type, int64_t k, int64_t first, int64_t count, int64_t n_total) {
  constexpr int64_t kUsed = 3;
  constexpr int64_t kTokens = 5;
  constexpr int64_t kRows = 11;
  std::string note = absl::StrCat("experts [", first, ", ", first + count, ") of ", n_total);
  return {Op::kMulMatId, note, WeightNmse(type), [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * as, b.Uniform(type, {k, kRows, count}));
            TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, {k, 1, kTokens}));
            TG_ASSIGN_OR_RETURN(Tensor * ids, b.DistinctIndices({kUsed, kTokens}, n_total));
            return MulMatId(b.ctx(), as, x, ids, static_cast<int32_t>(first),
                            static_cast<int32_t>(count));
          }};
}

}  // namespace

void AddMatMulCases(std::vector<OpCase>* cases) {
  AddWeightTypeCases(cases);
  AddSequenceBatchCases(cases);
  AddFusedCases(cases);
  AddShapeCases(cases);
  AddStridedCases(cases);
  constexpr int64_t kExperts = 4;
  constexpr int64_t kUsed = 2;
  constexpr int64_t kTokens = 3;
  constexpr int64_t kRowsOut = 19;
  for (DType type : kWeightTypes) {
    const int64_t k = IsQuantized(type) ? BlockSize(type) * 2 : 67;
    cases->push_back(MulMatIdCase(type, k, kRowsOut, kExperts, kUsed, kTokens, false));
  }
  cases->push_back(MulMatIdCase(DType::kF32, 67, kRowsOut, kExperts, kUsed, kTokens, true));
  cases->push_back(MulMatIdCase(DType::kQ4_0, 64, kRowsOut, kExperts, kUsed, kTokens, true));
  cases->push_back(MulMatIdCase(DType::kQ8_0, 96, 8, kExperts, kExperts, 1, false));
  cases->push_back(MulMatIdRangeCase(DType::kF32, 40, 2, 3, 8));
  cases->push_back(MulMatIdRangeCase(DType::kQ8_0, 64, 0, 2, 6));
  cases->push_back(MulMatIdRangeCase(DType::kQ4_K, 256, 5, 1, 6));
}

}  // namespace tg::ops_tool
