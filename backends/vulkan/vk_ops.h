// What the Vulkan kernels can run and how a node is recorded: the entry points the device
// (SupportsOp) and the stream (Compute) use. One Record* function per op family, in
// vk_op_*.cc. Thread-safety: the queries (SupportsNode, CheckNodePlacement, ...) only read; the
// Record* functions write into their Recorder, used by one stream's thread.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_OPS_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_OPS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "backends/vulkan/vk_physical.h"
#include "backends/vulkan/vk_pipelines.h"
#include "backends/vulkan/vk_recorder.h"
#include "core/tensor.h"

namespace tg::vulkan {

class VulkanDevice;

// True when the kernels handle `node` (op, types, layout, sizes). Anything else is left to
// another device by the scheduler.
bool SupportsNode(const PhysicalInfo& info, const Tensor& node);
// FAILED_PRECONDITION unless the node and its sources are placed in `device`'s memory.
absl::Status CheckNodePlacement(const VulkanDevice& device, const Tensor& node);
// Scratch bytes the node needs (converted activations of MUL_MAT / MUL_MAT_ID).
uint64_t NodeScratchBytes(const Tensor& node);
absl::Status RecordNode(Recorder& rec, const Tensor* node);
// A group of PlanFusion: its fused kernel, or the single node.
struct FusedGroup;
absl::Status RecordGroup(Recorder& rec, const FusedGroup& group);

// Workgroup sizes of the kernels (multiples of every subgroup size in use: 8 .. 64).
inline constexpr uint32_t kElementwiseGroup = 256;
inline constexpr uint32_t kRowGroup = 128;
// Shared memory of reduce.glsl's workgroup sums and maxima.
inline constexpr uint64_t kReduceSharedBytes = 32 * sizeof(float);
// ARGSORT, TOP_K and SAMPLE walk a long row once per radix pass (sort_rows.glsl): more
// invocations keep each one's loop count low (lavapipe ends an invocation after 65535 loop
// iterations in all).
inline constexpr uint32_t kSortGroup = 256;
// The keys one workgroup sorts in shared memory (sort_rows.glsl's kSortCap): the longest
// ARGSORT row, the largest k of TOP_K, SAMPLE's candidates.
inline constexpr int64_t kSortCap = 1024;

// Per op family (vk_op_*.cc).
absl::Status RecordElementwise(Recorder& rec, const Tensor* node);
absl::Status RecordRmsNorm(Recorder& rec, const Tensor* node);
absl::Status RecordSoftMax(Recorder& rec, const Tensor* node);
absl::Status RecordRope(Recorder& rec, const Tensor* node);
absl::Status RecordArgmax(Recorder& rec, const Tensor* node);
absl::Status RecordSumRows(Recorder& rec, const Tensor* node);
// One workgroup per row of node->src[0] (its address, strides and shape, the node's address
// and two op-specific words p0, p1 as push constants): SUM_ROWS, ARGSORT, TOP_K.
absl::Status RecordRowKernel(Recorder& rec, const Tensor* node, absl::string_view shader,
                             uint32_t group, uint32_t p0 = 0, uint32_t p1 = 0);
absl::Status RecordArgsort(Recorder& rec, const Tensor* node);  // and TOP_K.
absl::Status RecordSample(Recorder& rec, const Tensor* node);
absl::Status RecordCpy(Recorder& rec, const Tensor* node);
absl::Status RecordGetRows(Recorder& rec, const Tensor* node);
absl::Status RecordSetRows(Recorder& rec, const Tensor* node);
absl::Status RecordMulMat(Recorder& rec, const Tensor* node);
absl::Status RecordMulMatId(Recorder& rec, const Tensor* node);
// Fused kernels (vk_fusion.h decides when): several MUL_MATs of the same activations in one
// dispatch; SWIGLU(gate x, up x) straight from the two products; RMS_NORM of a sum, times a
// weight row.
bool CanMultiplyTogether(const Tensor& x, const Tensor& y);
// The most activation columns a fused group of products may have on `device`: any for the
// register kernels; on GPUs as many as the matrix-vector kernel takes.
int64_t FusedProductColumns(const VulkanDevice& device);
absl::Status RecordMulMatMulti(Recorder& rec, absl::Span<const Tensor* const> nodes);
absl::Status RecordGateUpSwiglu(Recorder& rec, const Tensor* gate, const Tensor* up,
                                const Tensor* swiglu);
// RMS_NORM with what rms_norm.comp computes in the same dispatch: the ADD before it, the MUL
// by its weight row after it, and the quantized activations of `product`, the MUL_MAT
// recorded next, when it multiplies the group's result (PrepareActivationsAhead).
struct NormGroup {
  const Tensor* add = nullptr;  // the norm's input, a + b of the same shape; may be nullptr.
  const Tensor* norm = nullptr;
  const Tensor* mul = nullptr;      // may be nullptr.
  const Tensor* product = nullptr;  // may be nullptr.
};
absl::Status RecordNormGroup(Recorder& rec, const NormGroup& group);
// Activations that the kernel writing `product`'s activations b can quantize as it writes b,
// so that the product needs no mul_mat_act dispatch: mul_mat_act.comp's format (1 Q8_0, 2
// Q8_K) and the scratch to write them to; format 0 when the product reads b as it is (float
// weights). After that kernel's dispatch, CommitActivationsAhead hands them to the product.
struct ActivationsAhead {
  uint32_t format = 0;
  int slot = 0;  // of the recorder's scratch.
  AddressRange scratch;
};
absl::StatusOr<ActivationsAhead> PrepareActivationsAhead(Recorder& rec, const Tensor* product);
void CommitActivationsAhead(Recorder& rec, const Tensor* product, const ActivationsAhead& ahead);
absl::Status RecordFlashAttn(Recorder& rec, const Tensor* node);
// True when `node` (a FLASH_ATTN) runs the decode kernel on `device`: few queries and a device
// that takes it (VulkanDevice::decode_attention).
bool UsesDecodeFlashAttn(const VulkanDevice& device, const Tensor& node);
uint64_t MulMatScratchBytes(const Tensor& node);

// Narrowing for push constants: SupportsNode keeps every size and stride below 2^32.
inline uint32_t U32(uint64_t v) { return static_cast<uint32_t>(v); }

// Dimensions First .. First + N - 1 of a tensor's sizes or strides (ne, nb) as push constants:
// PutDims(pc.ne, t->ne) all four, PutDims<1>(pc.nb, t->nb) the row strides of an nb[3].
template <size_t First = 0, size_t N, typename T>
void PutDims(uint32_t (&dst)[N], const T (&src)[kMaxDims]) {
  static_assert(First + N <= static_cast<size_t>(kMaxDims));
  for (size_t i = 0; i < N; ++i) dst[i] = U32(src[First + i]);
}

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_OPS_H_
