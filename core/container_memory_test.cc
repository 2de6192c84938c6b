// Tests of core/container_memory: fake cgroup trees (v1, v2, nested, unlimited, missing
// files, a container's namespaced view) built in a temporary directory and read through the
// reader's root; and, where this machine has a writable v1 memory cgroup, the real one.
#include "core/container_memory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

class FakeRoot {
 public:
  FakeRoot() {
    std::string tmpl = (fs::temp_directory_path() / "tg-cgroup-XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
  }
  ~FakeRoot() { fs::remove_all(root_); }

  void Write(const std::string& path, const std::string& text) const {
    const fs::path p = fs::path(root_) / path.substr(1);
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void Mkdir(const std::string& path) const {
    fs::create_directories(fs::path(root_) / path.substr(1));
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

constexpr char kV1Mountinfo[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

constexpr char kV2Mountinfo[] =
    "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate\n";

TEST(ContainerMemoryTest, NoCgroupFilesMeansNoLimit) {
  FakeRoot r;
  ContainerMemoryReader reader(r.root());
  const ContainerMemory m = reader.Read();
  EXPECT_EQ(m.limit, 0u);
  EXPECT_TRUE(m.limited_by.empty());
}

TEST(ContainerMemoryTest, V2LimitAndWorkingSet) {
  FakeRoot r;
  r.Write("/proc/self/mountinfo", kV2Mountinfo);
  r.Write("/proc/self/cgroup", "0::/pod/app\n");
  r.Write("/sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  r.Write("/sys/fs/cgroup/pod/app/memory.max", "1073741824\n");
  r.Write("/sys/fs/cgroup/pod/app/memory.current", std::to_string(300 * kMiB) + "\n");
  r.Write(
      "/sys/fs/cgroup/pod/app/memory.stat",
      "anon 1000\nfile 2000\ninactive_file " + std::to_string(100 * kMiB) + "\nactive_file 5\n");
  r.Write("/sys/fs/cgroup/pod/memory.max", "max\n");
  ContainerMemoryReader reader(r.root());
  ASSERT_EQ(reader.v2_dirs().size(), 3u);
  EXPECT_EQ(reader.v2_dirs()[0], r.root() + "/sys/fs/cgroup/pod/app");
  const ContainerMemory m = reader.Read();
  EXPECT_EQ(m.limit, kGiB);
  EXPECT_EQ(m.usage, 200 * kMiB);  // the inactive page cache does not count.
  EXPECT_EQ(m.available, kGiB - 200 * kMiB);
  EXPECT_EQ(m.limited_by, r.root() + "/sys/fs/cgroup/pod/app");
}

TEST(ContainerMemoryTest, V2AncestorLimitBindsWithItsOwnUsage) {
  FakeRoot r;
  r.Write("/proc/self/mountinfo", kV2Mountinfo);
  r.Write("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  r.Write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
  r.Write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.current", std::to_string(100 * kMiB));
  // The pod's limit is the one that binds; its siblings use memory too.
  r.Write("/sys/fs/cgroup/kubepods/pod1/memory.max", std::to_string(512 * kMiB));
  r.Write("/sys/fs/cgroup/kubepods/pod1/memory.current", std::to_string(400 * kMiB));
  r.Write("/sys/fs/cgroup/kubepods/memory.max", std::to_string(8 * kGiB));
  r.Write("/sys/fs/cgroup/kubepods/memory.current", std::to_string(6 * kGiB));
  const ContainerMemory m = ContainerMemoryReader(r.root()).Read();
  EXPECT_EQ(m.limit, 512 * kMiB);
  EXPECT_EQ(m.usage, 100 * kMiB);
  EXPECT_EQ(m.available, 112 * kMiB);  // the pod's headroom, the least one.
  EXPECT_EQ(m.limited_by, r.root() + "/sys/fs/cgroup/kubepods/pod1");
}

TEST(ContainerMemoryTest, V2UnlimitedEverywhere) {
  FakeRoot r;
  r.Write("/proc/self/mountinfo", kV2Mountinfo);
  r.Write("/proc/self/cgroup", "0::/a\n");
  r.Write("/sys/fs/cgroup/a/memory.max", "max\n");
  r.Write("/sys/fs/cgroup/a/memory.current", "12345\n");
  const ContainerMemory m = ContainerMemoryReader(r.root()).Read();
  EXPECT_EQ(m.limit, 0u);
  EXPECT_EQ(m.usage, 12345u);
}

TEST(ContainerMemoryTest, V1NestedLimitsAndHierarchicalLimit) {
  FakeRoot r;
  r.Write("/proc/self/mountinfo", kV1Mountinfo);
  r.Write("/proc/self/cgroup", "4:memory:/outer/inner\n3:cpu:/\n0::/\n");
  r.Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  r.Write("/sys/fs/cgroup/memory/outer/memory.limit_in_bytes", std::to_string(2 * kGiB));
  r.Write("/sys/fs/cgroup/memory/outer/memory.usage_in_bytes", std::to_string(kGiB));
  r.Write("/sys/fs/cgroup/memory/outer/memory.stat", "total_inactive_file 0\n");
  r.Write("/sys/fs/cgroup/memory/outer/inner/memory.limit_in_bytes", "9223372036854771712\n");
  r.Write("/sys/fs/cgroup/memory/outer/inner/memory.usage_in_bytes", std::to_string(300 * kMiB));
  r.Write("/sys/fs/cgroup/memory/outer/inner/memory.stat",
          "cache 5\ninactive_file 7\nhierarchical_memory_limit " + std::to_string(2 * kGiB) +
              "\ntotal_inactive_file " + std::to_string(50 * kMiB) + "\n");
  ContainerMemoryReader reader(r.root());
  ASSERT_EQ(reader.v1_dirs().size(), 3u);
  const ContainerMemory m = reader.Read();
  EXPECT_EQ(m.limit, 2 * kGiB);
  EXPECT_EQ(m.usage, 250 * kMiB);
  EXPECT_EQ(m.available, kGiB);  // the outer cgroup's headroom.
}

TEST(ContainerMemoryTest, V1HierarchicalLimitFromAnAncestorTheMountHides) {
  // A container's view: its own cgroup mounted as the root, the limit set above it.
  FakeRoot r;
  r.Write("/proc/self/mountinfo",
          "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,relatime - cgroup cgroup "
          "rw,memory\n");
  r.Write("/proc/self/cgroup", "4:memory:/docker/abc\n");
  r.Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  r.Write("/sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(64 * kMiB));
  r.Write("/sys/fs/cgroup/memory/memory.stat",
          "hierarchical_memory_limit " + std::to_string(kGiB) + "\n");
  ContainerMemoryReader reader(r.root());
  ASSERT_EQ(reader.v1_dirs().size(), 1u);
  EXPECT_EQ(reader.v1_dirs()[0], r.root() + "/sys/fs/cgroup/memory");
  const ContainerMemory m = ContainerMemoryReader(r.root()).Read();
  EXPECT_EQ(m.limit, kGiB);
  EXPECT_EQ(m.available, kGiB - 64 * kMiB);
}

TEST(ContainerMemoryTest, NamespacedPathThatIsMissingFallsBackToTheMountPoint) {
  FakeRoot r;
  r.Write("/proc/self/mountinfo", kV2Mountinfo);
  r.Write("/proc/self/cgroup", "0::/not/here\n");
  r.Write("/sys/fs/cgroup/memory.max", std::to_string(256 * kMiB));
  const ContainerMemory m = ContainerMemoryReader(r.root()).Read();
  EXPECT_EQ(m.limit, 256 * kMiB);
  EXPECT_EQ(m.usage, 0u);  // no memory.current: nothing known used.
  EXPECT_EQ(m.available, 256 * kMiB);
}

TEST(ContainerMemoryTest, WithoutMountinfoTheUsualMountPoints) {
  FakeRoot r;
  r.Write("/proc/self/cgroup", "4:memory:/box\n0::/box\n");
  r.Write("/sys/fs/cgroup/unified/cgroup.controllers", "\n");  // v2 without memory.
  r.Write("/sys/fs/cgroup/memory/box/memory.limit_in_bytes", std::to_string(kGiB));
  r.Write("/sys/fs/cgroup/memory/box/memory.usage_in_bytes", std::to_string(kGiB + 5));
  ContainerMemoryReader reader(r.root());
  EXPECT_EQ(reader.v2_dirs().size(), 1u);  // no such v2 cgroup: the mount point.
  const ContainerMemory m = reader.Read();
  EXPECT_EQ(m.limit, kGiB);
  EXPECT_EQ(m.available, 0u);  // over the limit (reclaim pending): nothing left.
}

TEST(ContainerMemoryTest, GarbageAndLimitsFromBothVersions) {
  FakeRoot r;
  r.Write("/proc/self/mountinfo", std::string(kV1Mountinfo) + "garbage line\n\n");
  r.Write("/proc/self/cgroup", "4:memory:/x\n0::/y\nnonsense\n");
  r.Write("/sys/fs/cgroup/memory/x/memory.limit_in_bytes", "not a number\n");
  r.Write("/sys/fs/cgroup/unified/y/memory.max", std::to_string(3 * kGiB));
  r.Write("/sys/fs/cgroup/unified/y/memory.current", std::to_string(kGiB));
  const ContainerMemory m = ContainerMemoryReader(r.root()).Read();
  EXPECT_EQ(m.limit, 3 * kGiB);
  EXPECT_EQ(m.available, 2 * kGiB);
}

// The real thing: this process moved into a v1 memory cgroup of 300 MiB (root and a
// writable /sys/fs/cgroup/memory needed; skipped elsewhere), read through "/".
TEST(ContainerMemoryTest, RealV1Cgroup) {
  const std::string base = "/sys/fs/cgroup/memory";
  const std::string dir = base + "/tg-container-memory-test-" + std::to_string(getpid());
  if (geteuid() != 0 || ::mkdir(dir.c_str(), 0755) != 0) {
    GTEST_SKIP() << "no writable v1 memory cgroup at " << base;
  }
  std::string old_cgroup;
  {
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);) {
      if (line.find(":memory:") != std::string::npos) old_cgroup = line.substr(line.rfind(':') + 1);
    }
  }
  std::ofstream(dir + "/memory.limit_in_bytes") << 300 * kMiB;
  std::ofstream(dir + "/cgroup.procs") << getpid();
  // Charged to the new cgroup: pages touched after the move.
  constexpr size_t kTouched = 16 * kMiB;
  std::string touched(kTouched, 'x');
  const ContainerMemory m = ContainerMemoryReader("/").Read();
  std::ofstream(base + old_cgroup + "/cgroup.procs") << getpid();  // out again.
  ::rmdir(dir.c_str());
  EXPECT_EQ(m.limit, 300 * kMiB);
  EXPECT_GE(m.usage, kTouched) << touched.size();
  EXPECT_LT(m.usage, 300 * kMiB);
  EXPECT_EQ(m.available, m.limit - m.usage);
}

}  // namespace
}  // namespace tg
