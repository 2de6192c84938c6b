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
  const absl::Status first = RegisterCudaFamily(/*verbose=*/true);
  const absl::Status second = RegisterCudaFamily(/*verbose=*/true);
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

// A CPU host without any NVIDIA driver says nothing unless asked; a driver that is there but
// too old names both versions; any other failure carries the runtime's error.
TEST(CudaDeviceTest, UnavailableLineSaysWhatTheUserCanDo) {
  const absl::Status why = absl::UnavailableError(
      "cudaGetDeviceCount(&n): cudaErrorInsufficientDriver (CUDA driver version is "
      "insufficient for CUDA runtime version)");
  EXPECT_EQ(CudaUnavailableLine(why, /*driver_installed=*/false, 0, 13000, false), "");
  EXPECT_THAT(CudaUnavailableLine(why, false, 0, 13000, /*verbose=*/true),
              HasSubstr("no NVIDIA driver is installed"));
  EXPECT_EQ(CudaUnavailableLine(why, true, 12040, 13000, false),
            "CUDA unavailable: the NVIDIA driver supports CUDA up to 12.4 but this build's "
            "runtime is CUDA 13.0 (update the driver); using the other devices");
  const absl::Status no_device = absl::UnavailableError("cudaGetDeviceCount(&n): cudaErrorNoDevice");
  EXPECT_EQ(CudaUnavailableLine(no_device, true, 13000, 13000, false),
            "CUDA unavailable (cudaGetDeviceCount(&n): cudaErrorNoDevice); using the other devices");
}

TEST(CudaDeviceTest, QuietEnvironmentSilencesTheNotice) {
  setenv("TG_CUDA_QUIET", "1", 1);
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(RegisterCudaFamily().ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace tg::cuda
