// The perf shape catalogue and per-node work accounting (see perf_cases.h).
#include "tools/tg-ops/perf_cases.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tg::ops_tool {
namespace {

using TensorOr = absl::StatusOr<Tensor*>;

constexpr int64_t kModelDim = 4096;  // llama-7B width.
constexpr int64_t kTokens = 512;     // a prompt batch.
constexpr int64_t kGemmDim = 1024;
constexpr int64_t kHeadDim = 128;
constexpr int64_t kHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kContext = 1024;
constexpr int64_t kVocabRows = 8192;
constexpr int64_t kSequences = 8;  // a many-sequence decode batch (llama-server --parallel 8).

PerfCase MatMul(DType type, int64_t k, int64_t m, int64_t n) {
  return {Op::kMulMat, absl::StrCat(DTypeName(type), " ", m, "x", k, " x ", n),
          [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, b.Uniform(type, {k, m}));
            TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, {k, n}));
            return MulMat(b.ctx(), a, x);
          }};
}

PerfCase MatMulId(DType type) {
  constexpr int64_t kK = 2048, kM = 1024, kExperts = 8, kUsed = 2, kMoeTokens = 4;
  return {Op::kMulMatId,
          absl::StrCat(DTypeName(type), " ", kExperts, "x", kM, "x", kK, " used ", kUsed, " x ",
                       kMoeTokens, " tok"),
          [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * as, b.Uniform(type, {kK, kM, kExperts}));
            TG_ASSIGN_OR_RETURN(Tensor * x, b.Uniform(DType::kF32, {kK, kUsed, kMoeTokens}));
            TG_ASSIGN_OR_RETURN(Tensor * ids, b.DistinctIndices({kUsed, kMoeTokens}, kExperts));
            return MulMatId(b.ctx(), as, x, ids);
          }};
}

// An op over one [4096, 512] activation (two for binary ops).
PerfCase Activation(Op op) {
  return {op, absl::StrCat("f32 ", kModelDim, "x", kTokens), [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, b.Uniform(DType::kF32, {kModelDim, kTokens}));
            switch (op) {
              case Op::kAdd:
              case Op::kMul:
              case Op::kSwiglu: {
                TG_ASSIGN_OR_RETURN(Tensor * c, b.Uniform(DType::kF32, {kModelDim, kTokens}));
                if (op == Op::kAdd) return Add(b.ctx(), a, c);
                return op == Op::kMul ? Mul(b.ctx(), a, c) : Swiglu(b.ctx(), a, c);
              }
              case Op::kScale:
                return Scale(b.ctx(), a, 0.5f, 0.1f);
              case Op::kRmsNorm:
                return RmsNorm(b.ctx(), a, 1e-5f);
              case Op::kSoftMax: {
                TG_ASSIGN_OR_RETURN(Tensor * m, b.Mask(DType::kF16, {kModelDim, kTokens}, 0.1));
                return SoftMax(b.ctx(), a, m, 0.125f);
              }
              default:
                return Silu(b.ctx(), a);
            }
          }};
}

PerfCase RopeCase() {
  return {
      Op::kRope, absl::StrCat("neox ", kHeadDim, "x", kHeads, "x", kTokens),
      [](CaseBuilder& b) -> TensorOr {
        TG_ASSIGN_OR_RETURN(Tensor * a, b.Uniform(DType::kF32, {kHeadDim, kHeads, kTokens}));
        TG_ASSIGN_OR_RETURN(Tensor * pos, b.Indices({kTokens}, kContext));
        RopeParams p;
        p.n_dims = kHeadDim;
        p.mode = kRopeNeox;
        return Rope(b.ctx(), a, pos, nullptr, p);
      }};
}

PerfCase GetRowsCase(DType type) {
  return {Op::kGetRows,
          absl::StrCat(DTypeName(type), " ", kTokens, " of ", kModelDim, "x", kVocabRows),
          [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, b.Uniform(type, {kModelDim, kVocabRows}));
            TG_ASSIGN_OR_RETURN(Tensor * idx, b.Indices({kTokens}, kVocabRows));
            return GetRows(b.ctx(), a, idx);
          }};
}

PerfCase SetRowsCase() {
  constexpr int64_t kRowLen = kHeadDim * kKvHeads, kWritten = 32;
  return {Op::kSetRows, absl::StrCat("f16 ", kWritten, " rows into ", kRowLen, "x", kContext),
          [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * cache, b.Uniform(DType::kF16, {kRowLen, kContext}));
            TG_ASSIGN_OR_RETURN(Tensor * rows, b.Uniform(DType::kF32, {kRowLen, kWritten}));
            TG_ASSIGN_OR_RETURN(Tensor * idx, b.DistinctIndices({kWritten}, kContext));
            return SetRows(b.ctx(), cache, rows, idx);
          }};
}

PerfCase CpyCase(DType to) {
  return {Op::kCpy, absl::StrCat("f32->", DTypeName(to), " ", kModelDim, "x", kTokens),
          [=](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, b.Uniform(DType::kF32, {kModelDim, kTokens}));
            TG_ASSIGN_OR_RETURN(Tensor * dst, b.Uniform(to, {kModelDim, kTokens}));
            return Cpy(b.ctx(), a, dst);
          }};
}

PerfCase ContTransposed() {
  return {Op::kCont, absl::StrCat("f32 transposed ", kModelDim, "x", kTokens),
          [](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, b.Uniform(DType::kF32, {kTokens, kModelDim}));
            TG_ASSIGN_OR_RETURN(Tensor * t, Transpose(b.ctx(), a));
            return Cont(b.ctx(), t);
          }};
}

PerfCase FlashAttnCase(int64_t n_q) {
  return {
      Op::kFlashAttn,
      absl::StrCat("f16 kv D=", kHeadDim, " H=", kHeads, "/", kKvHeads, " n_q=", n_q,
                   " n_kv=", kContext),
      [=](CaseBuilder& b) -> TensorOr {
        TG_ASSIGN_OR_RETURN(Tensor * q, b.Uniform(DType::kF32, {kHeadDim, n_q, kHeads}));
        TG_ASSIGN_OR_RETURN(Tensor * k, b.Uniform(DType::kF16, {kHeadDim, kContext, kKvHeads}));
        TG_ASSIGN_OR_RETURN(Tensor * v, b.Uniform(DType::kF16, {kHeadDim, kContext, kKvHeads}));
        TG_ASSIGN_OR_RETURN(Tensor * m, b.CausalMask(DType::kF16, {kContext, n_q}, n_q));
        return FlashAttn(b.ctx(), q, k, v, m, 1.0f / std::sqrt(static_cast<float>(kHeadDim)));
      }};
}

double Bytes(const Tensor* t) { return t == nullptr ? 0.0 : static_cast<double>(t->NumBytes()); }

}  // namespace

std::vector<PerfCase> PerfCases() {
  std::vector<PerfCase> cases;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                     DType::kMXFP4, DType::kQ4_K, DType::kQ6_K}) {
    cases.push_back(MatMul(type, kModelDim, kModelDim, 1));
  }
  // A decode step of several sequences at once (one column each).
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t n : {kSequences, 2 * kSequences}) {
      cases.push_back(MatMul(type, kModelDim, kModelDim, n));
    }
  }
  cases.push_back(MatMul(DType::kQ4_0, kModelDim, kModelDim, 32));
  cases.push_back(MatMul(DType::kF32, kGemmDim, kGemmDim, kGemmDim));
  cases.push_back(MatMulId(DType::kQ4_0));
  cases.push_back(MatMulId(DType::kMXFP4));
  for (Op op :
       {Op::kAdd, Op::kMul, Op::kScale, Op::kRmsNorm, Op::kSoftMax, Op::kSilu, Op::kSwiglu}) {
    cases.push_back(Activation(op));
  }
  cases.push_back(RopeCase());
  cases.push_back(GetRowsCase(DType::kF16));
  cases.push_back(GetRowsCase(DType::kQ4_0));
  cases.push_back(SetRowsCase());
  cases.push_back(CpyCase(DType::kF16));
  cases.push_back(CpyCase(DType::kQ8_0));
  cases.push_back(ContTransposed());
  cases.push_back(FlashAttnCase(1));
  cases.push_back(FlashAttnCase(32));
  return cases;
}

double NodeFlops(const Tensor& node) {
  const Tensor* a = node.src[0];
  switch (node.op) {
    case Op::kMulMat:
    case Op::kMulMatId:
      // 2 * K per output element.
      return 2.0 * static_cast<double>(a->ne[0]) * static_cast<double>(node.NumElements());
    case Op::kFlashAttn: {
      const Tensor* k = node.src[1];
      const Tensor* v = node.src[2];
      // q.k and p.v per (query, key, head, batch).
      return 2.0 * static_cast<double>(a->ne[1] * k->ne[1] * a->ne[2] * a->ne[3]) *
             static_cast<double>(a->ne[0] + v->ne[0]);
    }
    default:
      return 0.0;
  }
}

double NodeBytes(const Tensor& node) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  switch (node.op) {
    case Op::kGetRows:
      return Bytes(b) + static_cast<double>(node.NumRows() * a->RowBytes()) + Bytes(&node);
    case Op::kSetRows:
      return Bytes(b) + Bytes(node.src[2]) + static_cast<double>(b->NumRows() * node.RowBytes());
    case Op::kCpy:
      return Bytes(a) + Bytes(&node);
    case Op::kMulMatId: {
      // Only the chosen experts' weights are read.
      const double used = std::min<double>(a->ne[2], static_cast<double>(node.ne[1] * node.ne[2]));
      return Bytes(a) * used / static_cast<double>(a->ne[2]) + Bytes(b) + Bytes(node.src[2]) +
             Bytes(&node);
    }
    default: {
      double total = Bytes(&node);
      for (const Tensor* s : node.src) total += Bytes(s);
      return total;
    }
  }
}

}  // namespace tg::ops_tool
