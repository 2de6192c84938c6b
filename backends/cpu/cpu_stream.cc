#include "backends/cpu/cpu_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backends/cpu/compute_params.h"
#include "backends/cpu/kernels/kernels.h"

namespace tg::cpu {
namespace {

// Scratch is handed out 64-byte aligned (SIMD loads, no false sharing between threads).
constexpr size_t kScratchAlign = 64;

void RunNode(const ComputeParams& p, Tensor* node) {
  switch (node->op) {
    case Op::kGetRows: return ComputeGetRows(p, node);
    case Op::kSetRows: return ComputeSetRows(p, node);
    case Op::kMulMat: return ComputeMulMat(p, node);
    case Op::kMulMatId: return ComputeMulMatId(p, node);
    case Op::kAdd: return ComputeAdd(p, node);
    case Op::kMul: return ComputeMul(p, node);
    case Op::kScale: return ComputeScale(p, node);
    case Op::kRmsNorm: return ComputeRmsNorm(p, node);
    case Op::kRope: return ComputeRope(p, node);
    case Op::kSoftMax: return ComputeSoftMax(p, node);
    case Op::kSilu: return ComputeSilu(p, node);
    case Op::kSwiglu: return ComputeSwiglu(p, node);
    case Op::kSwigluOai: return ComputeSwigluOai(p, node);
    case Op::kArgmax: return ComputeArgmax(p, node);
    case Op::kSample: return ComputeSample(p, node);
    case Op::kArgsort: return ComputeArgsort(p, node);
    case Op::kTopK: return ComputeTopK(p, node);
    case Op::kSumRows: return ComputeSumRows(p, node);
    case Op::kDiv: return ComputeDiv(p, node);
    case Op::kCpy:
    case Op::kCont: return ComputeCpy(p, node);
    case Op::kFlashAttn: return ComputeFlashAttn(p, node);
    case Op::kNone:
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose:
    case Op::kCount: return;
  }
}

size_t NodeWorkSize(const Tensor* node, int nth) {
  switch (node->op) {
    case Op::kMulMat: return MulMatWorkSize(node, nth);
    case Op::kMulMatId: return MulMatIdWorkSize(node, nth);
    case Op::kFlashAttn: return FlashAttnWorkSize(node, nth);
    case Op::kSample: return SampleWorkSize(node, nth);
    default: return 0;
  }
}

}  // namespace

CpuStream::CpuStream(Device* device, int n_threads)
    : device_(device), pool_(n_threads), barrier_(pool_.size()), ranges_(pool_.size()) {}

absl::Status CpuStream::CopyTensorAsync(const Tensor* src, Tensor* dst) {
  if (dst->buffer == nullptr) return absl::FailedPreconditionError("copy into unplaced tensor");
  return dst->buffer->CopyFrom(src, dst);
}

size_t CpuStream::WorkSize(const Graph& graph) const {
  size_t size = 0;
  for (const Tensor* node : graph.nodes) size = std::max(size, NodeWorkSize(node, pool_.size()));
  return size;
}

absl::Status CpuStream::Compute(Graph& graph) {
  for (const Tensor* node : graph.nodes) {
    if (node->data == nullptr && node->NumElements() > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("CPU: node ", DescribeTensor(*node), " has no memory"));
    }
  }
  const size_t wsize = WorkSize(graph);
  if (wdata_.size() < wsize + kScratchAlign) wdata_.resize(wsize + kScratchAlign);
  auto* aligned = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(wdata_.data()) + kScratchAlign - 1) & ~(kScratchAlign - 1));
  KernelError error;
  const Tensor* failed_node = nullptr;
  const bool weights_from_memory = WeightsComeFromMemory(graph);
  pool_.Run([&](int ith) {
    ComputeParams p;
    p.ith = ith;
    p.nth = pool_.size();
    p.wdata = aligned;
    p.wsize = wsize;
    p.barrier = pool_.size() > 1 ? &barrier_ : nullptr;
    p.ranges = pool_.size() > 1 ? &ranges_ : nullptr;
    p.error = &error;
    p.weights_from_memory = weights_from_memory;
    for (Tensor* node : graph.nodes) {
      if (IsViewOp(node->op) || node->NumElements() == 0) continue;
      RunNode(p, node);
      p.Sync();
      if (ith == 0 && error.set.load() && failed_node == nullptr) failed_node = node;
    }
  });
  if (error.set.load()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU: ", failed_node ? DescribeTensor(*failed_node) : std::string("node"), ": ",
        error.message));
  }
  return absl::OkStatus();
}

}  // namespace tg::cpu
