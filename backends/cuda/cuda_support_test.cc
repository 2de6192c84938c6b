#include "backends/cuda/cuda_support.h"

#include "backends/cuda/kernel_types.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/ops.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

Tensor* New(Context& ctx, DType type, std::initializer_list<int64_t> ne) {
  absl::StatusOr<Tensor*> t = ctx.NewTensor(type, ne);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(CudaSupportTest, QuantizedDestinationsOnlyWhereAKernelQuantizes) {
  Context ctx;
  Tensor* rows = New(ctx, DType::kF32, {64, 2});
  Tensor* idx = New(ctx, DType::kI32, {2});
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    Tensor* cache = New(ctx, type, {64, 8});
    EXPECT_TRUE(CudaSupportsOp(**SetRows(ctx, cache, rows, idx))) << DTypeName(type);
    EXPECT_TRUE(CudaSupportsOp(**Cpy(ctx, New(ctx, DType::kF32, {64, 8}), cache)));
  }
  Tensor* k_quant = New(ctx, DType::kQ4_K, {256, 2});
  EXPECT_FALSE(CudaSupportsOp(**SetRows(ctx, k_quant, New(ctx, DType::kF32, {256, 2}), idx)));
  EXPECT_FALSE(CudaSupportsOp(**Cpy(ctx, New(ctx, DType::kF32, {256, 2}), k_quant)));
  EXPECT_TRUE(CudaSupportsOp(**Cpy(ctx, k_quant, New(ctx, DType::kF32, {256, 2}))));
  EXPECT_TRUE(CudaSupportsOp(**Cont(ctx, k_quant)));  // same type: a byte copy.
  for (DType type : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kBF16, DType::kF16}) {
    Tensor* w = New(ctx, type, {256, 5});
    EXPECT_TRUE(CudaSupportsOp(**GetRows(ctx, w, idx))) << DTypeName(type);
    EXPECT_TRUE(CudaSupportsOp(**MulMat(ctx, w, New(ctx, DType::kF32, {256, 3}))));
  }
}

// Every DType has kernels now: kernel_types.h's block sizes must be core's, and every
// quantized type must be taken by GET_ROWS, MUL_MAT, MUL_MAT_ID and dequantizing copies (the
// weight types of Q5_K_M/Q3_K_M mixes, IQ4_XS and gpt-oss's MXFP4 experts among them).
TEST(CudaSupportTest, EveryTypeHasKernels) {
  Context ctx;
  Tensor* idx = New(ctx, DType::kI32, {2});
  for (DType type : kAllDTypes) {
    const int t = static_cast<int>(type);
    EXPECT_EQ(BlockBytesOf(t), static_cast<int>(BlockBytes(type))) << DTypeName(type);
    EXPECT_EQ(BlockElems(t), BlockSize(type)) << DTypeName(type);
    EXPECT_EQ(IsQuantizedType(t), IsQuantized(type)) << DTypeName(type);
    if (!IsQuantized(type)) continue;
    Tensor* w = New(ctx, type, {256, 4});
    EXPECT_TRUE(CudaSupportsOp(**GetRows(ctx, w, idx))) << DTypeName(type);
    EXPECT_TRUE(CudaSupportsOp(**MulMat(ctx, w, New(ctx, DType::kF32, {256, 3}))))
        << DTypeName(type);
    Tensor* experts = New(ctx, type, {256, 4, 3});
    Tensor* ids = New(ctx, DType::kI32, {2, 5});
    EXPECT_TRUE(CudaSupportsOp(**MulMatId(ctx, experts, New(ctx, DType::kF32, {256, 2, 5}), ids)))
        << DTypeName(type);
    EXPECT_TRUE(CudaSupportsOp(**Cpy(ctx, w, New(ctx, DType::kF32, {256, 4})))) << DTypeName(type);
    EXPECT_TRUE(CudaSupportsOp(**Cont(ctx, w))) << DTypeName(type);  // a device memcpy.
    // Only Q8_0 and Q4_0 have a kernel quantizer.
    const bool writable = type == DType::kQ8_0 || type == DType::kQ4_0;
    EXPECT_EQ(CudaSupportsOp(**Cpy(ctx, New(ctx, DType::kF32, {256, 4}), w)), writable)
        << DTypeName(type);
  }
}

// MXFP4's 17-byte blocks: rows of an even byte count run on the device (gpt-oss: 90 blocks);
// an odd row stride is left to the CPU, since the matrix-vector kernel stages rows in 2-byte
// loads.
TEST(CudaSupportTest, Mxfp4RowsNeedAnEvenStride) {
  Context ctx;
  Tensor* even = New(ctx, DType::kMXFP4, {2880, 4});
  EXPECT_TRUE(KernelAligned(*even));
  EXPECT_TRUE(CudaSupportsOp(**MulMat(ctx, even, New(ctx, DType::kF32, {2880, 1}))));
  Tensor* odd = New(ctx, DType::kMXFP4, {96, 4});  // 3 blocks: 51-byte rows.
  EXPECT_FALSE(KernelAligned(*odd));
  EXPECT_FALSE(CudaSupportsOp(**MulMat(ctx, odd, New(ctx, DType::kF32, {96, 1}))));
}

TEST(CudaSupportTest, MisalignedViewsGoElsewhere) {
  Context ctx;
  Tensor* a = New(ctx, DType::kF32, {16, 4});
  Tensor* fine = *View(ctx, a, {8, 4}, {64}, 8);
  Tensor* odd = *View(ctx, a, {8, 4}, {64}, 6);  // 6 bytes in: not a whole float.
  Tensor* bad_stride = *View(ctx, a, {8, 4}, {62}, 0);
  EXPECT_TRUE(KernelAligned(*fine));
  EXPECT_FALSE(KernelAligned(*odd));
  EXPECT_FALSE(KernelAligned(*bad_stride));
  EXPECT_TRUE(CudaSupportsOp(**Scale(ctx, fine, 2.0f)));
  EXPECT_FALSE(CudaSupportsOp(**Scale(ctx, odd, 2.0f)));
  EXPECT_FALSE(CudaSupportsOp(**Add(ctx, fine, bad_stride)));
  EXPECT_TRUE(CudaSupportsOp(*odd));  // a view itself computes nothing.
}

// RunNode has no SAMPLE kernel: claiming it would fail the graph instead of letting the
// scheduler place the draw on the CPU.
TEST(CudaSupportTest, SampleIsLeftToTheCpu) {
  Context ctx;
  Tensor* logits = New(ctx, DType::kF32, {32, 2});
  Tensor* pos = New(ctx, DType::kI32, {2});
  EXPECT_TRUE(CudaSupportsOp(**Argmax(ctx, logits)));
  EXPECT_FALSE(CudaSupportsOp(**Sample(ctx, logits, pos, nullptr, SampleParams{})));
}

TEST(CudaSupportTest, FlashAttentionHeadsUpTo512) {
  Context ctx;
  for (int64_t d : {64, 128, 512, 576}) {
    Tensor* q = New(ctx, DType::kF32, {d, 3, 4});
    Tensor* k = New(ctx, DType::kF16, {d, 10, 2});
    Tensor* v = New(ctx, DType::kF16, {d, 10, 2});
    EXPECT_EQ(CudaSupportsOp(**FlashAttn(ctx, q, k, v, nullptr, 0.125f)), d <= 512) << d;
  }
}

TEST(CudaSupportTest, MulMatPathByColumnsAndWeightType) {
  Context ctx;
  PathOptions hopper;
  hopper.cc = 90;
  auto path = [&](DType type, int64_t cols, const PathOptions& o) {
    return ChooseMulMatPath(
        **MulMat(ctx, New(ctx, type, {256, 4}), New(ctx, DType::kF32, {256, cols})), o);
  };
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ6_K}) {
    EXPECT_EQ(path(type, 1, hopper), MulMatPath::kMatVec);
    EXPECT_EQ(path(type, kMatVecMaxColumns, hopper), MulMatPath::kMatVec);
  }
  EXPECT_EQ(path(DType::kF32, 9, hopper), MulMatPath::kGemmF32);
  EXPECT_EQ(path(DType::kBF16, 9, hopper), MulMatPath::kGemmF32);
  EXPECT_EQ(path(DType::kF16, 9, hopper), MulMatPath::kGemmF16);
  // Quantized weights: the int8 tiles from the matrix-vector limit up to mmq_max_batch.
  for (DType type : kAllDTypes) {
    if (!IsQuantized(type)) continue;
    EXPECT_EQ(path(type, 1, hopper), MulMatPath::kMatVec) << DTypeName(type);
    EXPECT_EQ(path(type, kMatVecMaxColumns + 1, hopper), MulMatPath::kMmq) << DTypeName(type);
    EXPECT_EQ(path(type, kDefaultMmqMaxBatch, hopper), MulMatPath::kMmq);
    EXPECT_EQ(path(type, kDefaultMmqMaxBatch + 1, hopper), MulMatPath::kGemmF16);
  }
  // No int8 mma before Turing: dequantize and cuBLAS.
  PathOptions pascal;
  pascal.cc = 61;
  EXPECT_EQ(path(DType::kQ4_K, 64, pascal), MulMatPath::kGemmF16);
  PathOptions turing;
  turing.cc = kMinTensorCoreCc;
  EXPECT_EQ(path(DType::kQ4_K, 64, turing), MulMatPath::kMmq);
  // TG_CUDA_MMQ_MAX_BATCH=0 turns the tiles off, a larger value takes bigger batches.
  PathOptions off = hopper;
  off.tuning.mmq_max_batch = 0;
  EXPECT_EQ(path(DType::kQ8_0, 64, off), MulMatPath::kGemmF16);
  PathOptions big = hopper;
  big.tuning.mmq_max_batch = 4096;
  EXPECT_EQ(path(DType::kQ8_0, 2048, big), MulMatPath::kMmq);
}

TEST(CudaSupportTest, TensorCoreAttentionForLongPromptsOfF16Caches) {
  Context ctx;
  PathOptions o;
  o.cc = 90;
  auto fa = [&](int64_t d, int64_t dv, int64_t n_q, DType kv) {
    Tensor* q = New(ctx, DType::kF32, {d, n_q, 8});
    Tensor* k = New(ctx, kv, {d, 256, 2});
    Tensor* v = New(ctx, kv, {dv, 256, 2});
    return *FlashAttn(ctx, q, k, v, nullptr, 0.125f);
  };
  const int64_t min_q = kDefaultFlashAttnMmaMinQueries;
  EXPECT_TRUE(UseFlashAttnMma(*fa(128, 128, min_q, DType::kF16), o));
  EXPECT_TRUE(UseFlashAttnMma(*fa(64, 64, 512, DType::kF16), o));
  EXPECT_FALSE(UseFlashAttnMma(*fa(128, 128, min_q - 1, DType::kF16), o));  // decode.
  EXPECT_FALSE(UseFlashAttnMma(*fa(128, 128, 512, DType::kF32), o));
  EXPECT_FALSE(UseFlashAttnMma(*fa(96, 96, 512, DType::kF16), o));
  EXPECT_FALSE(UseFlashAttnMma(*fa(128, 64, 512, DType::kF16), o));
  PathOptions old = o;
  old.cc = 70;
  EXPECT_FALSE(UseFlashAttnMma(*fa(128, 128, 512, DType::kF16), old));
}

TEST(CudaSupportTest, PromptSizedNodesByTokens) {
  Context ctx;
  Tensor* w = New(ctx, DType::kQ4_0, {256, 64});
  EXPECT_FALSE(PromptSized(**MulMat(ctx, w, New(ctx, DType::kF32, {256, 8})), 8));
  EXPECT_TRUE(PromptSized(**MulMat(ctx, w, New(ctx, DType::kF32, {256, 9})), 8));
  Tensor* experts = New(ctx, DType::kQ4_0, {256, 64, 4});
  EXPECT_TRUE(PromptSized(
      **MulMatId(ctx, experts, New(ctx, DType::kF32, {256, 2, 9}), New(ctx, DType::kI32, {2, 9})),
      8));
  EXPECT_FALSE(PromptSized(
      **MulMatId(ctx, experts, New(ctx, DType::kF32, {256, 2, 1}), New(ctx, DType::kI32, {2, 1})),
      8));
  Tensor* k = New(ctx, DType::kF16, {64, 256, 2});
  EXPECT_TRUE(
      PromptSized(**FlashAttn(ctx, New(ctx, DType::kF32, {64, 32, 4}), k, k, nullptr, 0.125f), 8));
  EXPECT_FALSE(
      PromptSized(**FlashAttn(ctx, New(ctx, DType::kF32, {64, 1, 4}), k, k, nullptr, 0.125f), 8));
  EXPECT_FALSE(PromptSized(**Scale(ctx, New(ctx, DType::kF32, {256, 512}), 1.0f), 8));
}

TEST(CudaSupportTest, OffloadsLargeBatchesOnly) {
  Context ctx;
  Tensor* w = New(ctx, DType::kQ4_0, {256, 64});
  EXPECT_FALSE(CudaOffloadOp(**MulMat(ctx, w, New(ctx, DType::kF32, {256, kOffloadMinBatch - 1}))));
  EXPECT_TRUE(CudaOffloadOp(**MulMat(ctx, w, New(ctx, DType::kF32, {256, kOffloadMinBatch}))));
  Tensor* experts = New(ctx, DType::kQ4_0, {256, 64, 4});
  Tensor* ids = New(ctx, DType::kI32, {2, kOffloadMinBatch});
  EXPECT_TRUE(CudaOffloadOp(
      **MulMatId(ctx, experts, New(ctx, DType::kF32, {256, 2, kOffloadMinBatch}), ids)));
  EXPECT_FALSE(CudaOffloadOp(**Scale(ctx, New(ctx, DType::kF32, {256, 512}), 1.0f)));
}

}  // namespace
}  // namespace tg::cuda
