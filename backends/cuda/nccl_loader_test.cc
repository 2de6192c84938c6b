// The NCCL loader: our declarations match nccl.h where the header is there; a missing
// library or one without the entry points is NOT_FOUND naming what was tried; the real
// library, where this machine has one, loads (no GPU needed for that) and reports its
// version; NCCL errors become statuses naming the call.
#include "backends/cuda/nccl_loader.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
// The values the loader passes across the ABI.
static_assert(static_cast<int>(tg::cuda::kNcclSuccess) == ncclSuccess);
static_assert(static_cast<int>(tg::cuda::kNcclSystemError) == ncclSystemError);
static_assert(static_cast<int>(tg::cuda::kNcclRemoteError) == ncclRemoteError);
static_assert(static_cast<int>(tg::cuda::kNcclInProgress) == ncclInProgress);
static_assert(static_cast<int>(tg::cuda::kNcclFloat32) == ncclFloat32);
static_assert(static_cast<int>(tg::cuda::kNcclBfloat16) == ncclBfloat16);
static_assert(static_cast<int>(tg::cuda::kNcclSum) == ncclSum);
static_assert(sizeof(tg::cuda::NcclComm) == sizeof(ncclComm_t));
#endif

namespace tg::cuda {
namespace {

using ::testing::HasSubstr;

TEST(NcclLoaderTest, MissingLibraryIsNotFoundNamingEachCandidate) {
  const absl::StatusOr<NcclApi> api =
      LoadNccl({"/nonexistent/libnccl.so.2", "libtg-no-such-nccl.so.9"});
  ASSERT_FALSE(api.ok());
  EXPECT_TRUE(absl::IsNotFound(api.status()));
  EXPECT_THAT(api.status().message(), HasSubstr("/nonexistent/libnccl.so.2"));
  EXPECT_THAT(api.status().message(), HasSubstr("libtg-no-such-nccl.so.9"));
}

TEST(NcclLoaderTest, LibraryWithoutTheEntryPointsIsRefused) {
  const absl::StatusOr<NcclApi> api = LoadNccl({"libm.so.6"});
  ASSERT_FALSE(api.ok());
  EXPECT_THAT(api.status().message(), HasSubstr("libm.so.6 has no ncclGetVersion"));
}

TEST(NcclLoaderTest, LoadsTheMachinesNcclWhereThereIsOne) {
  const absl::StatusOr<NcclApi> api = LoadNccl(NcclCandidates());
  if (!api.ok()) {
    EXPECT_TRUE(absl::IsNotFound(api.status())) << api.status();
    GTEST_SKIP() << api.status();
  }
  EXPECT_GE(api->version, kMinNcclVersion);
  int again = 0;
  ASSERT_EQ(api->get_version(&again), kNcclSuccess);
  EXPECT_EQ(again, api->version);
  // Errors read as statuses naming the call, in NCCL's words.
  const absl::Status s = NcclError(*api, kNcclInvalidArgument, "ncclAllReduce");
  EXPECT_TRUE(absl::IsInternal(s));
  EXPECT_THAT(s.message(), HasSubstr("ncclAllReduce: "));
  EXPECT_THAT(s.message(), HasSubstr("ncclResult_t 4"));
  EXPECT_TRUE(absl::IsUnavailable(NcclError(*api, kNcclRemoteError, "ncclAllReduce")));
  EXPECT_TRUE(absl::IsUnavailable(NcclError(*api, kNcclSystemError, "ncclAllReduce")));
}

TEST(NcclLoaderTest, EnvironmentLibraryComesFirst) {
  setenv("TG_NCCL_LIBRARY", "/opt/nccl/libnccl.so.2", 1);
  const std::vector<std::string> c = NcclCandidates();
  unsetenv("TG_NCCL_LIBRARY");
  ASSERT_GE(c.size(), 2u);
  EXPECT_EQ(c[0], "/opt/nccl/libnccl.so.2");
  EXPECT_EQ(c[1], "libnccl.so.2");
  EXPECT_EQ(NcclCandidates()[0], "libnccl.so.2");
}

}  // namespace
}  // namespace tg::cuda
