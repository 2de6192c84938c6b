// MUL_MAT and MUL_MAT_ID on a CUDA stream. Decode-sized products (ChooseMulMatPath) run the
// matrix-vector kernel on Q8_1 activations (quantized weights) or f32 activations (float
// weights); quantized weights with more columns the int8 tile kernel (up to the MMQ batch
// limit, on GPUs with tensor cores); larger ones a cuBLAS GEMM per (j2, j3) batch: SGEMM for
// F32/BF16 weights, and for F16 and quantized weights an F16 GEMM with f32 accumulation (tensor
// cores) on weights dequantized to F16 in scratch. MUL_MAT_ID always takes the matrix-vector
// kernel, one column per (slot, token) with its expert. Without cuBLAS (or beyond its int sizes)
// the matrix-vector kernel takes every product, kMatVecMaxCols columns per pass.
#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cuda_support.h"
#include "core/status_macros.h"

namespace tg::cuda {
namespace {

// A dense copy of t in `type`, in scratch (block keeps it until the caller has queued its
// users).
absl::StatusOr<TensorView> DenseCopy(NodeContext& ctx, const Tensor& t, DType type,
                                     ScratchPool::Block* block) {
  Tensor dense;
  dense.type = type;
  std::copy(t.ne, t.ne + kMaxDims, dense.ne);
  SetContiguousStrides(&dense);
  TG_ASSIGN_OR_RETURN(*block, ctx.pool->Acquire(dense.NumBytes()));
  TensorView v = ViewOf(dense);
  v.data = block->as<char>();
  TG_CUDA_RETURN_IF_ERROR(LaunchCopy(v, ViewOf(t), ctx.stream));
  return v;
}

// Columns of activations in the matrix-vector kernel's format, one per row of b.
struct Activations {
  const char* data = nullptr;
  int64_t col_bytes = 0;
  ScratchPool::Block block;
};

absl::Status PrepareActivations(NodeContext& ctx, DType weight_type, const Tensor& b,
                                Activations* out) {
  const int64_t k = b.ne[0];
  if (IsQuantized(weight_type)) {
    out->col_bytes = k / kQK8_1 * static_cast<int64_t>(sizeof(BlockQ8_1));
    TG_ASSIGN_OR_RETURN(out->block, ctx.pool->Acquire(b.NumRows() * out->col_bytes));
    TG_CUDA_RETURN_IF_ERROR(LaunchQuantizeAct(static_cast<int>(weight_type), ViewOf(b),
                                              out->block.as<BlockQ8_1>(), ctx.stream));
    out->data = out->block.as<char>();
    return absl::OkStatus();
  }
  out->col_bytes = k * static_cast<int64_t>(sizeof(float));
  if (b.IsContiguous()) {
    out->data = static_cast<const char*>(b.data);
    return absl::OkStatus();
  }
  TG_ASSIGN_OR_RETURN(TensorView dense, DenseCopy(ctx, b, DType::kF32, &out->block));
  out->data = dense.data;
  return absl::OkStatus();
}

// The weight fields that the matrix-vector and the int8 tile kernels' arguments share.
template <class Args>
void SetWeights(const Tensor& w, Args* p) {
  p->weight_type = static_cast<int>(w.type);
  p->w = static_cast<const char*>(w.data);
  p->w_nb1 = static_cast<int64_t>(w.nb[1]);
  p->w_nb2 = static_cast<int64_t>(w.nb[2]);
  p->w_nb3 = static_cast<int64_t>(w.nb[3]);
  p->k = w.ne[0];
  p->m = w.ne[1];
}

// The matrix-vector kernel's arguments for weights w, activations act and result dst.
MatVecArgs ArgsFor(const Tensor& w, const Activations& act, Tensor* dst) {
  MatVecArgs p;
  SetWeights(w, &p);
  p.act = act.data;
  p.act_col_bytes = act.col_bytes;
  p.dst = static_cast<float*>(dst->data);
  return p;
}

// Columns of b in passes of kMatVecMaxCols; w_up: the up projection when gate/up are fused.
absl::Status MatVecPasses(NodeContext& ctx, const Tensor& a, const Tensor& b, const char* w_up,
                          Tensor* dst) {
  Activations act;
  TG_RETURN_IF_ERROR(PrepareActivations(ctx, a.type, b, &act));
  MatVecArgs p = ArgsFor(a, act, dst);
  p.w_up = w_up;
  p.n_batch = b.ne[2] * b.ne[3];
  p.cols_per_batch = b.ne[1];
  p.b2 = b.ne[2];
  p.r2 = b.ne[2] / a.ne[2];
  p.r3 = b.ne[3] / a.ne[3];
  for (p.col0 = 0; p.col0 < b.ne[1]; p.col0 += kMatVecMaxCols) {
    p.n_cols = static_cast<int>(std::min<int64_t>(kMatVecMaxCols, b.ne[1] - p.col0));
    TG_CUDA_RETURN_IF_ERROR(LaunchMatVec(p, ctx.stream));
  }
  return absl::OkStatus();
}

absl::Status MatVec(NodeContext& ctx, Tensor* node) {
  return MatVecPasses(ctx, *node->src[0], *node->src[1], nullptr, node);
}

// The int8 tile product; false in *done when the grid cannot address it.
absl::Status Mmq(NodeContext& ctx, Tensor* node, bool* done) {
  const Tensor& a = *node->src[0];
  const Tensor& b = *node->src[1];
  MmqArgs p;
  SetWeights(a, &p);
  p.n = b.ne[1];
  p.dst = static_cast<float*>(node->data);
  p.dst_nb1 = static_cast<int64_t>(node->nb[1]);
  p.dst_nb2 = static_cast<int64_t>(node->nb[2]);
  p.dst_nb3 = static_cast<int64_t>(node->nb[3]);
  p.b2 = b.ne[2];
  p.b3 = b.ne[3];
  p.r2 = b.ne[2] / a.ne[2];
  p.r3 = b.ne[3] / a.ne[3];
  *done = MmqFits(p);
  if (!*done) return absl::OkStatus();
  Activations act;
  TG_RETURN_IF_ERROR(PrepareActivations(ctx, a.type, b, &act));
  p.act = act.data;
  p.act_col_bytes = act.col_bytes;
  TG_CUDA_RETURN_IF_ERROR(LaunchMmq(p, ctx.stream));
  return absl::OkStatus();
}

// t as a GEMM operand of element type `type`: in place when its rows are dense with an int
// leading dimension, else densely copied into scratch.
absl::StatusOr<TensorView> GemmOperand(NodeContext& ctx, const Tensor& t, DType type,
                                       ScratchPool::Block* block) {
  const size_t es = BlockBytes(type);
  const bool in_place = t.type == type && t.nb[0] == es && t.nb[1] % es == 0 && t.nb[2] % es == 0 &&
                        t.nb[3] % es == 0 && t.nb[1] / es >= static_cast<size_t>(t.ne[0]) &&
                        t.nb[1] / es <= INT_MAX;
  if (in_place) return ViewOf(t);
  return DenseCopy(ctx, t, type, block);
}

absl::Status Gemm(NodeContext& ctx, Tensor* node, MulMatPath path) {
  const Tensor& a = *node->src[0];
  const Tensor& b = *node->src[1];
  const bool f16 = path == MulMatPath::kGemmF16;
  const DType type = f16 ? DType::kF16 : DType::kF32;
  const int64_t es = static_cast<int64_t>(BlockBytes(type));
  ScratchPool::Block a_block, b_block;
  TG_ASSIGN_OR_RETURN(const TensorView av, GemmOperand(ctx, a, type, &a_block));
  TG_ASSIGN_OR_RETURN(const TensorView bv, GemmOperand(ctx, b, type, &b_block));
  const int k = static_cast<int>(a.ne[0]), m = static_cast<int>(a.ne[1]);
  const int n = static_cast<int>(b.ne[1]);
  const int lda = static_cast<int>(av.nb[1] / es), ldb = static_cast<int>(bv.nb[1] / es);
  const int ldc = static_cast<int>(node->nb[1] / sizeof(float));
  const int64_t r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
  const float one = 1.0f, zero = 0.0f;
  for (int64_t j3 = 0; j3 < b.ne[3]; ++j3) {
    for (int64_t j2 = 0; j2 < b.ne[2]; ++j2) {
      const char* ap = av.data + (j2 / r2) * av.nb[2] + (j3 / r3) * av.nb[3];
      const char* bp = bv.data + j2 * bv.nb[2] + j3 * bv.nb[3];
      auto* cp = reinterpret_cast<float*>(static_cast<char*>(node->data) + j2 * node->nb[2] +
                                          j3 * node->nb[3]);
      // Column-major: C (m x n) = A^T (m x k, A stored k x m) * B (k x n).
      if (f16) {
        TG_CUBLAS_RETURN_IF_ERROR(ctx.blas->gemm_ex(
            ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, ap, CUDA_R_16F, lda, bp,
            CUDA_R_16F, ldb, &zero, cp, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      } else {
        TG_CUBLAS_RETURN_IF_ERROR(ctx.blas->sgemm(
            ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, reinterpret_cast<const float*>(ap),
            lda, reinterpret_cast<const float*>(bp), ldb, &zero, cp, ldc));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunMulMat(NodeContext& ctx, Tensor* node) {
  const MulMatPath path = ChooseMulMatPath(*node, ctx.paths);
  if (path == MulMatPath::kMmq) {
    bool done = false;
    TG_RETURN_IF_ERROR(Mmq(ctx, node, &done));
    if (done) return absl::OkStatus();
  }
  if (path == MulMatPath::kMatVec || ctx.blas == nullptr || !GemmFitsCublas(*node)) {
    return MatVec(ctx, node);
  }
  return Gemm(ctx, node, path == MulMatPath::kGemmF32 ? path : MulMatPath::kGemmF16);
}

absl::Status RunGateUpSwiglu(NodeContext& ctx, const Tensor& gate, const Tensor& up,
                             Tensor* swiglu) {
  return MatVecPasses(ctx, *gate.src[0], *gate.src[1], static_cast<const char*>(up.src[0]->data),
                      swiglu);
}

absl::Status RunMulMatId(NodeContext& ctx, Tensor* node) {
  const Tensor& as = *node->src[0];
  const Tensor& b = *node->src[1];
  const Tensor& ids = *node->src[2];
  Activations act;
  TG_RETURN_IF_ERROR(PrepareActivations(ctx, as.type, b, &act));
  MatVecArgs p = ArgsFor(as, act, node);
  p.n_used = ids.ne[0];
  p.n_batch = ids.ne[0] * ids.ne[1];
  p.ids = static_cast<const char*>(ids.data);
  p.ids_nb0 = static_cast<int64_t>(ids.nb[0]);
  p.ids_nb1 = static_cast<int64_t>(ids.nb[1]);
  p.n_expert = as.ne[2];
  p.expert_first = node->op_params[kMulMatIdFirstExpert];
  p.expert_range = node->op_params[kMulMatIdExpertCount] != 0;
  p.act_per_token = b.ne[1];
  p.err = ctx.err;
  TG_CUDA_RETURN_IF_ERROR(LaunchMatVec(p, ctx.stream));
  return absl::OkStatus();
}

}  // namespace tg::cuda
