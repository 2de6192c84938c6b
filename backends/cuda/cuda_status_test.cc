#include "backends/cuda/cuda_status.h"

#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

absl::Status Fails(cudaError_t err) {
  TG_CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

TEST(CudaStatusTest, ErrorsNameTheCallAndMapToCodes) {
  const absl::Status oom = CudaError(cudaErrorMemoryAllocation, "cudaMalloc(&p, 1 << 40)");
  EXPECT_TRUE(absl::IsResourceExhausted(oom));
  EXPECT_NE(oom.message().find("cudaMalloc(&p, 1 << 40)"), std::string::npos) << oom;
  EXPECT_NE(oom.message().find("cudaErrorMemoryAllocation"), std::string::npos) << oom;
  EXPECT_TRUE(absl::IsUnavailable(CudaError(cudaErrorInsufficientDriver, "x")));
  EXPECT_TRUE(absl::IsUnavailable(CudaError(cudaErrorNoDevice, "x")));
  EXPECT_TRUE(absl::IsUnavailable(CudaError(cudaErrorDevicesUnavailable, "x")));
  EXPECT_TRUE(absl::IsInternal(CudaError(cudaErrorIllegalAddress, "x")));
  EXPECT_TRUE(CudaError(cudaSuccess, "x").ok());
}

TEST(CudaStatusTest, MacroReturnsWithTheExpressionText) {
  const absl::Status s = Fails(cudaErrorInvalidValue);
  EXPECT_TRUE(absl::IsInternal(s));
  EXPECT_NE(s.message().find("err"), std::string::npos) << s;
  EXPECT_TRUE(Fails(cudaSuccess).ok());
  const absl::Status b = CublasError(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate(&h)");
  EXPECT_TRUE(absl::IsResourceExhausted(b));
  EXPECT_NE(b.message().find("cublasCreate(&h)"), std::string::npos) << b;
}

}  // namespace
}  // namespace tg::cuda
