#include "backends/cpu/cpu_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "core/host_memory.h"

namespace tg::cpu {
namespace {

// The smaps line `key` (e.g. "THPeligible:") of the mapping that holds address p; -1 if absent.
int64_t SmapsField(const void* p, const std::string& key) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(':') > 8) {
      inside = at >= begin && at < end;
    } else if (inside && line.rfind(key, 0) == 0) {
      return std::stoll(line.substr(key.size()));
    }
  }
  return -1;
}

TEST(CpuBufferTest, LargeBuffersAskForHugePages) {
  CpuDevice cpu("CPU", "cpu", 1);
  constexpr size_t kBytes = size_t{32} << 20;
  absl::StatusOr<std::unique_ptr<Buffer>> big = cpu.default_buffer_type()->Allocate(kBytes);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*big)->base()) % (size_t{2} << 20), 0u);
  std::memset((*big)->base(), 1, kBytes);  // the buffer is usable whatever the kernel gave.
  absl::StatusOr<std::unique_ptr<Buffer>> small =
      cpu.default_buffer_type()->Allocate(size_t{1} << 20);  // below the huge-page size.
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*small)->base()) % kCpuAlignment, 0u);
  if (!TransparentHugePagesUsable()) {
    GTEST_SKIP() << "transparent huge pages are off or absent on this kernel";
  }
  const int64_t eligible = SmapsField((*big)->base(), "THPeligible:");
  if (eligible < 0) GTEST_SKIP() << "/proc/self/smaps has no THPeligible field here";
  EXPECT_EQ(eligible, 1);
}

}  // namespace
}  // namespace tg::cpu
