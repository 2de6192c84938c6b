// The CUDA family on whatever machine runs the test: without a driver or a GPU (CI) it must
// register nothing, say why once, and leave the process working; with GPUs, devices must
// carry the ids and facts the tools print. (Tests that need a GPU: tests/gpu.)
#include "backends/cuda/cuda_device.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(CudaDeviceTest, RegistersItsGpusOrSaysOnceWhyNot) {
  unsetenv("TG_CUDA_QUIET");
  const absl::StatusOr<int> count = CudaDeviceCount();
  ::testing::internal::CaptureStderr();
  const absl::Status first = RegisterCudaFamily();
  const absl::Status second = RegisterCudaFamily();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(first.ok()) << first;
  ASSERT_TRUE(second.ok()) << second;
  if (!count.ok()) {
    EXPECT_TRUE(absl::IsUnavailable(count.status())) << count.status();
    EXPECT_THAT(count.status().message(), HasSubstr("cudaGetDeviceCount"));
    EXPECT_FALSE(Registry::Get().HasFamily("CUDA"));
    // One line, naming the reason, however often registration is asked for.
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_THAT(err, HasSubstr("CUDA unavailable"));
    EXPECT_THAT(err, HasSubstr(std::string(count.status().message())));
    return;
  }
  ASSERT_GT(*count, 0);
  ASSERT_TRUE(Registry::Get().HasFamily("CUDA")) << err;
  for (Device* d : Registry::Get().devices()) {
    if (!absl::StartsWith(d->name(), "CUDA")) continue;
    EXPECT_THAT(std::string(d->id()), StartsWith("pci:"));
    EXPECT_THAT(std::string(d->description()), HasSubstr("compute capability"));
    EXPECT_GT(d->memory().total, 0u);
    EXPECT_EQ(d->default_buffer_type()->device(), d);
    EXPECT_TRUE(d->host_buffer_type()->is_host());
  }
}

TEST(CudaDeviceTest, QuietEnvironmentSilencesTheNotice) {
  setenv("TG_CUDA_QUIET", "1", 1);
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(RegisterCudaFamily().ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace tg::cuda
