// The CPU kernels, one per op. Each is called by all nth threads of the pool with the same
// dst; a kernel splits its work by params.ith/nth and may call params.Sync() (every thread
// must make the same number of Sync calls). Shapes and types were validated by the graph
// builder (core/ops.h); kernels read data through ne/nb, so views and permutations work.
// WorkSize functions return the shared scratch a node needs (0 when none).
#ifndef TENSORGRID_BACKENDS_CPU_KERNELS_KERNELS_H_
#define TENSORGRID_BACKENDS_CPU_KERNELS_KERNELS_H_

#include <cstddef>

#include "backends/cpu/compute_params.h"
#include "core/graph.h"
#include "core/tensor.h"

namespace tg::cpu {

void ComputeGetRows(const ComputeParams& p, Tensor* dst);
void ComputeSetRows(const ComputeParams& p, Tensor* dst);
// Whether the weights of the graph's products (MUL_MAT, MUL_MAT_ID) together exceed what
// the last-level cache keeps from one step to the next (ComputeParams::weights_from_memory).
bool WeightsComeFromMemory(const Graph& graph);
void ComputeMulMat(const ComputeParams& p, Tensor* dst);
size_t MulMatWorkSize(const Tensor* dst, int nth);
void ComputeMulMatId(const ComputeParams& p, Tensor* dst);
size_t MulMatIdWorkSize(const Tensor* dst, int nth);
void ComputeAdd(const ComputeParams& p, Tensor* dst);
void ComputeMul(const ComputeParams& p, Tensor* dst);
void ComputeScale(const ComputeParams& p, Tensor* dst);
void ComputeRmsNorm(const ComputeParams& p, Tensor* dst);
void ComputeRope(const ComputeParams& p, Tensor* dst);
void ComputeSoftMax(const ComputeParams& p, Tensor* dst);
void ComputeSilu(const ComputeParams& p, Tensor* dst);
void ComputeSwiglu(const ComputeParams& p, Tensor* dst);
void ComputeSwigluOai(const ComputeParams& p, Tensor* dst);
void ComputeArgmax(const ComputeParams& p, Tensor* dst);
void ComputeArgsort(const ComputeParams& p, Tensor* dst);
void ComputeTopK(const ComputeParams& p, Tensor* dst);
void ComputeSumRows(const ComputeParams& p, Tensor* dst);
void ComputeDiv(const ComputeParams& p, Tensor* dst);
void ComputeSample(const ComputeParams& p, Tensor* dst);
size_t SampleWorkSize(const Tensor* dst, int nth);
void ComputeCpy(const ComputeParams& p, Tensor* dst);  // CPY and CONT.
void ComputeFlashAttn(const ComputeParams& p, Tensor* dst);
size_t FlashAttnWorkSize(const Tensor* dst, int nth);

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_KERNELS_KERNELS_H_
