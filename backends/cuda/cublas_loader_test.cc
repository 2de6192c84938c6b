#include "backends/cuda/cublas_loader.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

std::string Maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Linking the CUDA backend must not map cuBLAS into every process (its thread-local storage
// breaks small-stack threads elsewhere); only the first use loads it.
TEST(CublasLoaderTest, LoadedOnFirstUseOnly) {
  EXPECT_THAT(Maps(), ::testing::Not(::testing::HasSubstr("libcublas")));
  absl::StatusOr<const CublasApi*> api = Cublas();
  if (!api.ok()) {
    EXPECT_TRUE(absl::IsNotFound(api.status()));
    EXPECT_THAT(api.status().message(), ::testing::HasSubstr("libcublas.so."));
    return;
  }
  const CublasApi& a = **api;
  EXPECT_TRUE(a.create && a.destroy && a.set_stream && a.sgemm && a.gemm_ex && a.status_name &&
              a.status_string);
  EXPECT_STREQ(a.status_name(CUBLAS_STATUS_ALLOC_FAILED), "CUBLAS_STATUS_ALLOC_FAILED");
  EXPECT_THAT(Maps(), ::testing::HasSubstr("libcublas"));
  EXPECT_EQ(*Cublas(), *api);  // loaded once.
}

}  // namespace
}  // namespace tg::cuda
