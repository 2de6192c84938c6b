// Tests of core/host_memory: the readings against /proc/meminfo read here independently, and
// the container's limit never raising what the physical memory allows.
#include "core/host_memory.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tg {
namespace {

// MemTotal from /proc/meminfo in bytes, read without the code under test; 0 if absent.
uint64_t MemInfo(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == field + ":") return kib * 1024;
  }
  return 0;
}

TEST(HostMemoryTest, PhysicalIsWhatTheKernelSays) {
  const uint64_t mem_total = MemInfo("MemTotal");
  if (mem_total == 0) GTEST_SKIP() << "no /proc/meminfo here";
  // sysconf counts whole pages of the same memory /proc/meminfo reports in KiB.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  EXPECT_LE(PhysicalMemoryTotal(), mem_total + page);
  EXPECT_GE(PhysicalMemoryTotal() + 64 * page, mem_total);
  // MemAvailable moves all the time: the two readings a margin apart.
  constexpr uint64_t kDrift = uint64_t{256} << 20;
  const uint64_t available = MemInfo("MemAvailable");
  EXPECT_LE(PhysicalMemoryAvailable(), available + kDrift);
  EXPECT_GE(PhysicalMemoryAvailable() + kDrift, available);
}

TEST(HostMemoryTest, ContainerAwareNeverAboveThePhysical) {
  const uint64_t total = HostMemoryTotal();
  const uint64_t available = HostMemoryAvailable();
  EXPECT_GT(total, 0u);
  EXPECT_GT(available, 0u);
  EXPECT_LE(available, total);
  EXPECT_LE(total, PhysicalMemoryTotal());
  constexpr uint64_t kDrift = uint64_t{256} << 20;
  EXPECT_LE(available, PhysicalMemoryAvailable() + kDrift);
}

}  // namespace
}  // namespace tg
