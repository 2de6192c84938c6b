// TG_CUDA_DEVICES planning with a fake device query: names, ids and memory shares of the
// virtual devices, GPUs left out with their reason, the environment value's checks, and the
// memory share's accounting (also under concurrent reservations).
#include "backends/cuda/virtual_devices.h"

#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

using ::testing::HasSubstr;

constexpr size_t kGiB = size_t{1} << 30;

class FakeQuery : public GpuQuery {
 public:
  absl::Status count_error;
  std::map<int, absl::StatusOr<PhysicalGpu>> gpus;

  absl::StatusOr<int> Count() const override {
    if (!count_error.ok()) return count_error;
    return static_cast<int>(gpus.size());
  }
  absl::StatusOr<PhysicalGpu> Describe(int ordinal) const override { return gpus.at(ordinal); }

  void Add(int ordinal, size_t total) {
    PhysicalGpu g;
    g.ordinal = ordinal;
    g.name = "Fake GPU";
    g.pci_id = absl::StrCat("pci:0000:0", ordinal + 1, ":00.0");
    g.cc = 90;
    g.total_memory = total;
    gpus[ordinal] = g;
  }
};

TEST(VirtualDevicesTest, OneGpuUnsplitKeepsItsIdAndMemory) {
  FakeQuery q;
  q.Add(0, 80 * kGiB);
  const absl::StatusOr<CudaDevicePlan> plan = PlanCudaDevices(q, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->devices.size(), 1u);
  EXPECT_EQ(plan->devices[0].name, "CUDA0");
  EXPECT_EQ(plan->devices[0].id, "pci:0000:01:00.0");
  EXPECT_EQ(plan->devices[0].memory_share, 80 * kGiB);
  EXPECT_EQ(plan->devices[0].n_slices, 1);
}

TEST(VirtualDevicesTest, SplitsEveryGpuInOrderWithDistinctIdsAndEqualShares) {
  FakeQuery q;
  q.Add(0, 80 * kGiB);
  q.Add(1, 40 * kGiB + 3);
  const absl::StatusOr<CudaDevicePlan> plan = PlanCudaDevices(q, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->devices.size(), 4u);
  const char* names[] = {"CUDA0", "CUDA1", "CUDA2", "CUDA3"};
  const char* ids[] = {"pci:0000:01:00.0/v0", "pci:0000:01:00.0/v1", "pci:0000:02:00.0/v0",
                       "pci:0000:02:00.0/v1"};
  for (int i = 0; i < 4; ++i) {
    const VirtualGpu& v = plan->devices[i];
    EXPECT_EQ(v.name, names[i]);
    EXPECT_EQ(v.id, ids[i]);
    EXPECT_EQ(v.gpu.ordinal, i / 2);
    EXPECT_EQ(v.slice, i % 2);
    EXPECT_EQ(v.n_slices, 2);
  }
  EXPECT_EQ(plan->devices[0].memory_share, 40 * kGiB);
  EXPECT_EQ(plan->devices[3].memory_share, 20 * kGiB + 1);  // the odd byte is nobody's.
  EXPECT_LE(plan->devices[2].memory_share + plan->devices[3].memory_share, 40 * kGiB + 3);
}

TEST(VirtualDevicesTest, UnusableGpusAreLeftOutWithTheirReasonAndNamesStayDense) {
  FakeQuery q;
  q.gpus[0] = absl::FailedPreconditionError("no kernels for compute capability 6.1");
  q.Add(1, 16 * kGiB);
  const absl::StatusOr<CudaDevicePlan> plan = PlanCudaDevices(q, 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->devices.size(), 3u);
  EXPECT_EQ(plan->devices[0].name, "CUDA0");
  EXPECT_EQ(plan->devices[0].gpu.ordinal, 1);
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_THAT(plan->notes[0], HasSubstr("CUDA device 0 skipped"));
  EXPECT_THAT(plan->notes[0], HasSubstr("6.1"));
}

TEST(VirtualDevicesTest, NoUsableGpuIsUnavailable) {
  FakeQuery none;
  EXPECT_TRUE(absl::IsUnavailable(PlanCudaDevices(none, 1).status()));
  FakeQuery broken;
  broken.count_error = absl::UnavailableError("cudaGetDeviceCount: no driver");
  const absl::Status s = PlanCudaDevices(broken, 2).status();
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_THAT(s.message(), HasSubstr("no driver"));
  FakeQuery bad;
  bad.gpus[0] = absl::FailedPreconditionError("old");
  EXPECT_THAT(PlanCudaDevices(bad, 1).status().message(), HasSubstr("none of the 1"));
}

TEST(VirtualDevicesTest, ParsesTheEnvironmentValue) {
  EXPECT_EQ(*ParseCudaDevices(nullptr), 1);
  EXPECT_EQ(*ParseCudaDevices(""), 1);
  EXPECT_EQ(*ParseCudaDevices("2"), 2);
  EXPECT_EQ(*ParseCudaDevices("16"), kMaxCudaVirtualDevices);
  for (const char* bad : {"0", "17", "-1", "two", "2x"}) {
    const absl::Status s = ParseCudaDevices(bad).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_THAT(s.message(), HasSubstr(bad));
    EXPECT_THAT(s.message(), HasSubstr("1 to 16"));
  }
  FakeQuery q;
  q.Add(0, kGiB);
  EXPECT_TRUE(absl::IsInvalidArgument(PlanCudaDevices(q, 0).status()));
}

TEST(MemoryShareTest, ReservesUpToTheShareAndReportsWhatIsLeft) {
  MemoryShare share(10 * kGiB);
  EXPECT_TRUE(share.TryReserve(6 * kGiB));
  EXPECT_FALSE(share.TryReserve(5 * kGiB));  // 11 GiB > 10.
  EXPECT_EQ(share.used(), 6 * kGiB);
  EXPECT_TRUE(share.TryReserve(4 * kGiB));
  EXPECT_FALSE(share.TryReserve(1));
  share.Release(4 * kGiB);
  // The GPU has plenty: the share's rest is what is free.
  DeviceMemory m = share.Report({70 * kGiB, 80 * kGiB});
  EXPECT_EQ(m.free, 4 * kGiB);
  EXPECT_EQ(m.total, 10 * kGiB);
  // The other slices used most of the GPU: less is free than the share would allow.
  m = share.Report({kGiB, 80 * kGiB});
  EXPECT_EQ(m.free, kGiB);
  EXPECT_FALSE(share.TryReserve(SIZE_MAX));
}

TEST(MemoryShareTest, ConcurrentReservationsNeverExceedTheShare) {
  constexpr size_t kLimit = 1000;
  MemoryShare share(kLimit);
  std::vector<std::thread> threads;
  std::atomic<size_t> granted{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (share.TryReserve(3)) granted += 3;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(granted.load(), share.used());
  EXPECT_LE(share.used(), kLimit);
  EXPECT_GT(share.used(), kLimit - 3);
}

}  // namespace
}  // namespace tg::cuda
