#include "backends/cuda/cuda_support.h"

#include "core/context.h"
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
  auto path = [&](DType type, int64_t cols) {
    return ChooseMulMatPath(
        **MulMat(ctx, New(ctx, type, {256, 4}), New(ctx, DType::kF32, {256, cols})));
  };
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ6_K}) {
    EXPECT_EQ(path(type, 1), MulMatPath::kMatVec);
    EXPECT_EQ(path(type, kMatVecMaxColumns), MulMatPath::kMatVec);
  }
  EXPECT_EQ(path(DType::kF32, 9), MulMatPath::kGemmF32);
  EXPECT_EQ(path(DType::kBF16, 9), MulMatPath::kGemmF32);
  EXPECT_EQ(path(DType::kF16, 9), MulMatPath::kGemmF16);
  EXPECT_EQ(path(DType::kQ4_K, 512), MulMatPath::kGemmF16);
  EXPECT_EQ(path(DType::kQ8_0, 512), MulMatPath::kGemmF16);
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
