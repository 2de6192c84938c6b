// Recording of MUL_MAT and MUL_MAT_ID. Quantized weights get their activations quantized
// first, as the CPU does (Q8_0 or Q8_K, packed in 32-value units: mul_mat_act.comp); float
// weights read f32 activations, copied contiguous first when strided. The prepared
// activations are kept for the next node that multiplies the same ones (a layer's q, k and v
// projections). On CPU-like devices (lavapipe) every MUL_MAT runs the register-blocked kernel
// (mul_mat_reg.comp); on GPUs few activation columns go to the matrix-vector kernel and many
// to the shared-memory tiled one. TG_VULKAN_KERNELS=gpu|cpu overrides the choice (tests).
// The fused groups of vk_fusion.h (q/k/v; gate, up and their SWIGLU) run in one dispatch of
// the register kernel or the matrix-vector kernel, in the same modes with the same push
// constants.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_ops.h"
#include "core/quant_blocks.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

// mul_mat_act.comp formats.
enum ActFormat : uint32_t { kActPlain = 0, kActQ8_0 = 1, kActQ8_K = 2, kActNone = 99 };
// Bytes of 32 quantized activations (act_unit.glsl): 32 int8, the f32 scale, the int sum.
constexpr uint64_t kActUnitBytes = 40;
// mul_mat_reg.comp: one weight row per invocation.
constexpr uint32_t kRegGroup = 64;

// Up to this many activation columns (a decode step of as many sequences) the matrix-vector
// kernel wins: a workgroup takes up to kMatVecGroupCols columns and reads each weight once for
// all of them, where the tiled kernel pays its shared-memory staging and 64-column tiles (on
// lavapipe 16 columns took 4-8x less time than the tiled kernel; on GPUs unmeasured).
constexpr int64_t kMatVecMaxCols = 16;
constexpr uint32_t kMatVecGroup = 64;
constexpr uint32_t kMatVecGroupCols = 16;
// Weight rows per workgroup of one column; with more columns fewer rows, so that a workgroup's
// accumulators (columns x rows, twice in the gate/up mode) stay at most kMatVecAccumulators,
// in registers, and its partial sums in 4 KiB of shared memory.
constexpr uint32_t kMatVecRows = 4;
constexpr uint32_t kMatVecAccumulators = 16;
// Tiled kernel: 64 x 64 outputs per workgroup of 256 invocations, 4 x 4 each. Its two f32
// tiles of 32 x 64 take kTileShared bytes of shared memory, Vulkan's minimum: a device with
// less (none known) multiplies every column with the matrix-vector kernel.
constexpr uint32_t kTileGroup = 256;
constexpr uint32_t kTileShared = 2 * 64 * 32 * sizeof(float);
constexpr uint32_t kTileM = 64;
constexpr uint32_t kTileN = 64;
constexpr uint32_t kThreadM = 4;
constexpr uint32_t kThreadN = 4;

// The CPU's activation format for each weight type (backends/cpu/kernels/vec_dot.h): Q8_0 for
// the 32-weight block types, Q8_K for the 256-weight super-block types.
ActFormat FormatFor(DType weight, const Tensor* b) {
  if (!IsQuantized(weight)) return b->nb[0] == sizeof(float) ? kActNone : kActPlain;
  return BlockSize(weight) == kQK8_0 ? kActQ8_0 : kActQ8_K;
}

// mul_mat_act.comp
struct ActPC {
  uint64_t b, d;
  uint32_t ne[4];  // b's, ne[0] = K
  uint32_t b_nb[4];
  uint32_t format, n;
};

// mul_mat_vec.comp, mul_mat.comp and mul_mat_reg.comp: addresses and sizes of one product;
// mul_mat_reg.comp's fused modes give some slots other meanings and use q (see the shader).
struct MatMulPC {
  uint64_t a, b, d;
  uint32_t K, M, N;
  uint32_t a_nb[3], b_nb[3], d_nb[3];  // dimensions 1 to 3
  uint32_t ne12, r2, r3;
  uint64_t q[4];
};
static_assert(sizeof(MatMulPC) <= kPushConstantBytes);

// mul_mat_id.comp
struct MatIdPC {
  uint64_t a, b, d, ids, err;
  uint32_t K, M, n_used, b_ne1;
  uint32_t a_nb[2], b_nb[2], d_nb[2];  // dimensions 1 and 2
  uint32_t ids_nb[2];                  // dimensions 0 and 1
  uint32_t E, tag;
  int32_t first;    // the id of expert 0 of `as` (an expert range), and
  uint32_t ranged;  // 1 when `as` is such a range: other ids are zero rows, not errors.
};
static_assert(sizeof(MatIdPC) <= kPushConstantBytes);

uint32_t Ceil(uint64_t n, uint64_t d) { return static_cast<uint32_t>((n + d - 1) / d); }

// Where the kernels read the activations: b itself or its converted copy.
struct Activations {
  uint64_t address;
  uint32_t nb[3];  // dimensions 1 to 3
  AddressRange range;
};

// Bytes of one prepared activation row of K values.
uint64_t ActRowBytes(ActFormat format, uint64_t k) {
  return format == kActPlain ? k * sizeof(float) : k / 32 * kActUnitBytes;
}

// Scratch for b's activations converted to `format`: in the slot the cache does not hold, so
// that the cached conversion stays intact until the new one is committed.
absl::StatusOr<ActivationsAhead> ReserveConverted(Recorder& rec, ActFormat format,
                                                  const Tensor* b) {
  const Recorder::ConvertedActivations& cache = rec.converted();
  ActivationsAhead ahead;
  ahead.format = format;
  ahead.slot = cache.valid ? 1 - cache.slot : 0;
  TG_ASSIGN_OR_RETURN(
      ahead.scratch,
      rec.Scratch(ahead.slot, ActRowBytes(format, b->ne[0]) * static_cast<uint64_t>(b->NumRows())));
  return ahead;
}

// After the dispatch that wrote them: b's converted activations are those in `ahead`.
void CommitConverted(Recorder& rec, const Tensor* b, const ActivationsAhead& ahead) {
  Recorder::ConvertedActivations& cache = rec.converted();
  cache.valid = true;
  cache.src = b;
  cache.format = ahead.format;
  cache.slot = ahead.slot;
  cache.source = rec.Range(b);
  cache.converted = ahead.scratch;
}

absl::StatusOr<Activations> PrepareActivations(Recorder& rec, DType weight, const Tensor* b) {
  const ActFormat format = FormatFor(weight, b);
  if (format == kActNone) {
    return Activations{rec.Address(b), {U32(b->nb[1]), U32(b->nb[2]), U32(b->nb[3])}, rec.Range(b)};
  }
  const uint64_t k = static_cast<uint64_t>(b->ne[0]);
  const uint64_t row_bytes = ActRowBytes(format, k);
  Activations out;
  out.nb[0] = U32(row_bytes);
  out.nb[1] = U32(row_bytes * b->ne[1]);
  out.nb[2] = U32(row_bytes * b->ne[1] * b->ne[2]);
  const Recorder::ConvertedActivations& cache = rec.converted();
  if (cache.valid && cache.src == b && cache.format == format) {
    out.address = cache.converted.begin;
    out.range = cache.converted;
    return out;
  }
  TG_ASSIGN_OR_RETURN(const ActivationsAhead converted, ReserveConverted(rec, format, b));
  const AddressRange scratch = converted.scratch;
  ActPC pc{};
  pc.b = rec.Address(b);
  pc.d = scratch.begin;
  PutDims(pc.ne, b->ne);
  PutDims(pc.b_nb, b->nb);
  pc.format = format;
  const uint64_t block = format == kActPlain ? 1 : (format == kActQ8_0 ? kQK8_0 : kQK_K);
  pc.n = U32(static_cast<uint64_t>(b->NumElements()) / block);
  const uint32_t spec[] = {kElementwiseGroup};
  const AddressRange reads[] = {rec.Range(b)};
  const AddressRange writes[] = {scratch};
  TG_RETURN_IF_ERROR(rec.Dispatch1D("mul_mat_act", spec, &pc, sizeof(pc),
                                    Ceil(pc.n, kElementwiseGroup), reads, writes));
  CommitConverted(rec, b, converted);
  out.address = scratch.begin;
  out.range = scratch;
  return out;
}

}  // namespace

absl::StatusOr<ActivationsAhead> PrepareActivationsAhead(Recorder& rec, const Tensor* product) {
  const Tensor* b = product->src[1];
  const ActFormat format = FormatFor(product->src[0]->type, b);
  if (format != kActQ8_0 && format != kActQ8_K) return ActivationsAhead{};
  return ReserveConverted(rec, format, b);
}

void CommitActivationsAhead(Recorder& rec, const Tensor* product, const ActivationsAhead& ahead) {
  if (ahead.format != 0) CommitConverted(rec, product->src[1], ahead);
}

namespace {

// The push constants of `node` = src0 x src1 with the activations at `act`.
MatMulPC ProductPC(Recorder& rec, const Tensor* node, const Activations& act) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  MatMulPC pc{};
  pc.a = rec.Address(a);
  pc.b = act.address;
  pc.d = rec.Address(node);
  pc.K = U32(a->ne[0]);
  pc.M = U32(a->ne[1]);
  pc.N = U32(b->ne[1]);
  PutDims<1>(pc.a_nb, a->nb);
  std::ranges::copy(act.nb, pc.b_nb);
  PutDims<1>(pc.d_nb, node->nb);
  pc.ne12 = U32(b->ne[2]);
  pc.r2 = U32(b->ne[2] / a->ne[2]);
  pc.r3 = U32(b->ne[3] / a->ne[3]);
  return pc;
}

}  // namespace

uint64_t MulMatScratchBytes(const Tensor& node) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  const ActFormat format = FormatFor(a->type, b);
  if (format == kActNone) return 0;
  return static_cast<uint64_t>(b->NumRows()) * ActRowBytes(format, b->ne[0]);
}

namespace {

// Activation columns per invocation of mul_mat_reg.comp: enough to reuse each loaded weight
// unit, few enough to stay in registers.
uint32_t RegColumns(int64_t n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8; }

// The modes of mul_mat_reg.comp and mul_mat_vec.comp.
enum ProductMode : uint32_t { kSingle = 0, kMulti = 1, kSwiglu = 2 };

absl::Status DispatchReg(Recorder& rec, ProductMode mode, uint32_t type, int64_t rows, int64_t n,
                         uint32_t batches, const MatMulPC& pc, absl::Span<const AddressRange> reads,
                         absl::Span<const AddressRange> writes) {
  const uint32_t tn = RegColumns(n);
  const uint32_t spec[] = {kRegGroup, type, tn, rec.device()->info().subgroup_size, mode};
  const uint32_t groups[3] = {Ceil(rows, kRegGroup), Ceil(n, tn), batches};
  return rec.Dispatch("mul_mat_reg", spec, &pc, sizeof(pc), groups, reads, writes);
}

// Activation columns per workgroup of mul_mat_vec.comp: all of them up to kMatVecGroupCols,
// rounded up to a power of two (few pipelines; a column's results do not depend on it).
uint32_t VecColumns(int64_t n) {
  uint32_t cols = 1;
  while (cols < n && cols < kMatVecGroupCols) cols *= 2;
  return cols;
}

absl::Status DispatchVec(Recorder& rec, ProductMode mode, uint32_t type, int64_t rows, int64_t n,
                         uint32_t batches, const MatMulPC& pc, absl::Span<const AddressRange> reads,
                         absl::Span<const AddressRange> writes) {
  const uint32_t cols = VecColumns(n);
  const uint32_t group_rows = std::clamp(kMatVecAccumulators / cols, 1u, kMatVecRows);
  const uint32_t spec[] = {kMatVecGroup, type, group_rows, mode, cols};
  const uint32_t groups[3] = {Ceil(rows, group_rows), Ceil(n, cols), batches};
  return rec.Dispatch("mul_mat_vec", spec, &pc, sizeof(pc), groups, reads, writes);
}

// A fused group's dispatch: the register kernel, or on GPUs the matrix-vector one (PlanFusion
// fuses only products of at most FusedProductColumns columns there).
absl::Status DispatchFused(Recorder& rec, ProductMode mode, uint32_t type, int64_t rows, int64_t n,
                           const MatMulPC& pc, absl::Span<const AddressRange> reads,
                           absl::Span<const AddressRange> writes) {
  if (rec.device()->register_kernels()) {
    return DispatchReg(rec, mode, type, rows, n, 1, pc, reads, writes);
  }
  return DispatchVec(rec, mode, type, rows, n, 1, pc, reads, writes);
}

bool UsesMatVec(const VulkanDevice& device, int64_t columns) {
  return columns <= kMatVecMaxCols || device.info().max_shared_memory < kTileShared;
}

}  // namespace

absl::Status RecordMulMat(Recorder& rec, const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  TG_ASSIGN_OR_RETURN(const Activations act, PrepareActivations(rec, a->type, b));
  const AddressRange reads[] = {rec.Range(a), act.range};
  const AddressRange writes[] = {rec.Range(node)};
  const uint32_t batches = U32(b->ne[2] * b->ne[3]);
  const uint32_t type = static_cast<uint32_t>(a->type);
  const MatMulPC pc = ProductPC(rec, node, act);
  if (rec.device()->register_kernels()) {
    return DispatchReg(rec, kSingle, type, a->ne[1], b->ne[1], batches, pc, reads, writes);
  }
  if (UsesMatVec(*rec.device(), b->ne[1])) {
    return DispatchVec(rec, kSingle, type, a->ne[1], b->ne[1], batches, pc, reads, writes);
  }
  const uint32_t spec[] = {kTileGroup, type, kTileM, kTileN, kThreadM, kThreadN};
  const uint32_t groups[3] = {Ceil(pc.M, kTileM), Ceil(pc.N, kTileN), batches};
  return rec.Dispatch("mul_mat", spec, &pc, sizeof(pc), groups, reads, writes);
}

bool CanMultiplyTogether(const Tensor& x, const Tensor& y) {
  const Tensor* a = x.src[0];
  const Tensor* b = x.src[1];
  const Tensor* a2 = y.src[0];
  return x.op == Op::kMulMat && y.op == Op::kMulMat && y.src[1] == b && a2->type == a->type &&
         a2->ne[0] == a->ne[0] && a->ne[2] * a->ne[3] == 1 && a2->ne[2] * a2->ne[3] == 1 &&
         b->ne[2] * b->ne[3] == 1 && x.IsContiguous() && y.IsContiguous();
}

int64_t FusedProductColumns(const VulkanDevice& device) {
  if (device.register_kernels() || UsesMatVec(device, std::numeric_limits<int64_t>::max())) {
    return std::numeric_limits<int64_t>::max();
  }
  return kMatVecMaxCols;
}

absl::Status RecordMulMatMulti(Recorder& rec, absl::Span<const Tensor* const> nodes) {
  const Tensor* b = nodes[0]->src[1];
  const DType type = nodes[0]->src[0]->type;
  TG_ASSIGN_OR_RETURN(const Activations act, PrepareActivations(rec, type, b));
  // Slots of mul_mat_reg.comp's mode 1: b, the matrices, their results, rows, row strides.
  MatMulPC pc = ProductPC(rec, nodes[0], act);
  pc.a = act.address;
  uint64_t* const matrices[3] = {&pc.b, &pc.d, &pc.q[0]};
  uint32_t* const rows_of[3] = {&pc.M, &pc.a_nb[1], &pc.a_nb[2]};
  uint32_t* const nb1_of[3] = {&pc.a_nb[0], &pc.b_nb[1], &pc.b_nb[2]};
  std::vector<AddressRange> reads = {act.range};
  std::vector<AddressRange> writes;
  int64_t rows = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Tensor* a = nodes[i]->src[0];
    *matrices[i] = rec.Address(a);
    pc.q[1 + i] = rec.Address(nodes[i]);
    *rows_of[i] = U32(a->ne[1]);
    *nb1_of[i] = U32(a->nb[1]);
    rows += a->ne[1];
    reads.push_back(rec.Range(a));
    writes.push_back(rec.Range(nodes[i]));
  }
  if (nodes.size() < 3) pc.a_nb[2] = 0;  // no third matrix: M2 = 0.
  if (nodes.size() < 2) pc.a_nb[1] = 0;
  return DispatchFused(rec, kMulti, static_cast<uint32_t>(type), rows, b->ne[1], pc, reads, writes);
}

absl::Status RecordGateUpSwiglu(Recorder& rec, const Tensor* gate, const Tensor* up,
                                const Tensor* swiglu) {
  const Tensor* b = gate->src[1];
  const DType type = gate->src[0]->type;
  TG_ASSIGN_OR_RETURN(const Activations act, PrepareActivations(rec, type, b));
  // Slots of mul_mat_reg.comp's mode 2: b, the two matrices, the three results.
  MatMulPC pc = ProductPC(rec, gate, act);
  pc.a = act.address;
  pc.b = rec.Address(gate->src[0]);
  pc.d = rec.Address(up->src[0]);
  pc.b_nb[1] = U32(up->src[0]->nb[1]);
  pc.d_nb[0] = U32(swiglu->nb[1]);
  pc.q[0] = rec.Address(swiglu);
  pc.q[1] = rec.Address(gate);
  pc.q[2] = rec.Address(up);
  const AddressRange reads[] = {act.range, rec.Range(gate->src[0]), rec.Range(up->src[0])};
  const AddressRange writes[] = {rec.Range(swiglu), rec.Range(gate), rec.Range(up)};
  return DispatchFused(rec, kSwiglu, static_cast<uint32_t>(type), gate->src[0]->ne[1], b->ne[1], pc,
                       reads, writes);
}

absl::Status RecordMulMatId(Recorder& rec, const Tensor* node) {
  const Tensor* as = node->src[0];
  const Tensor* b = node->src[1];
  const Tensor* ids = node->src[2];
  TG_ASSIGN_OR_RETURN(const Activations act, PrepareActivations(rec, as->type, b));
  MatIdPC pc{};
  pc.a = rec.Address(as);
  pc.b = act.address;
  pc.d = rec.Address(node);
  pc.ids = rec.Address(ids);
  pc.err = rec.error_address();
  pc.K = U32(as->ne[0]);
  pc.M = U32(as->ne[1]);
  pc.n_used = U32(ids->ne[0]);
  pc.b_ne1 = U32(b->ne[1]);
  PutDims<1>(pc.a_nb, as->nb);
  std::copy_n(act.nb, 2, pc.b_nb);
  PutDims<1>(pc.d_nb, node->nb);
  PutDims(pc.ids_nb, ids->nb);
  pc.E = U32(as->ne[2]);
  pc.tag = rec.ErrorTag(node);
  pc.first = node->op_params[kMulMatIdFirstExpert];
  pc.ranged = node->op_params[kMulMatIdExpertCount] > 0 ? 1 : 0;
  const uint32_t spec[] = {kMatVecGroup, static_cast<uint32_t>(as->type), kMatVecRows};
  const uint32_t groups[3] = {Ceil(pc.M, kMatVecRows), U32(ids->ne[0] * ids->ne[1]), 1};
  const AddressRange reads[] = {rec.Range(as), act.range, rec.Range(ids)};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch("mul_mat_id", spec, &pc, sizeof(pc), groups, reads, writes);
}

}  // namespace tg::vulkan
