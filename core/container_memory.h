// The memory limit of the container this process runs in: the memory cgroup (v1 or v2) of
// the process and its ancestors, read from the cgroup filesystem. A pod or `docker run -m`
// sets such a limit far below the host's physical memory; a process that judged its memory
// by the host alone would take allocations the kernel then answers with an OOM kill (an
// rpc-server accepting a session's buffer, a client splitting layers onto its CPU).
//
// ContainerMemoryReader finds the process's memory cgroup directories once (from
// /proc/self/cgroup and /proc/self/mountinfo, or the usual mount points where mountinfo says
// nothing) and reads their current values on every Read(). Every path is taken under a root
// directory, so that tests build fake cgroup trees in a temporary directory.
//
// What is read, per directory from the process's cgroup up to the mount's root:
//   v2: memory.max ("max" = none), memory.current, memory.stat's inactive_file;
//   v1: memory.limit_in_bytes, memory.usage_in_bytes, memory.stat's total_inactive_file, and
//       the leaf's hierarchical_memory_limit (v1's effective limit, the least of the
//       ancestors' limits when use_hierarchy is on).
// A limit of 2^62 bytes or more (v1's "unlimited" is 9223372036854771712 with 4 KiB pages,
// a little less with larger pages) is no limit. A missing or unreadable file is no limit.
// Usage is what the kernel could not take back without killing: the cgroup's charged memory
// less its inactive page cache (inactive_file), the "working set" the kubelet evicts by and
// docker stats shows. Clean inactive file pages are dropped by the kernel before any OOM
// kill, so counting them would refuse allocations the container can hold; the active page
// cache is counted, since the kernel reclaims it only after the inactive pages.
// Thread-safety: Read() is const and may be called from any thread.
#ifndef TENSORGRID_CORE_CONTAINER_MEMORY_H_
#define TENSORGRID_CORE_CONTAINER_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tg {

// One reading of the container's memory.
struct ContainerMemory {
  // The least limit along the cgroup path; 0 = no limit found (not in a container, or an
  // unlimited one).
  uint64_t limit = 0;
  // The least headroom (limit - usage) over the limited cgroups of the path, each cgroup's
  // usage counting its descendants (the limit that binds may be an ancestor's, shared with
  // siblings). Meaningless when limit is 0.
  uint64_t available = 0;
  // The process's own cgroup's usage (working set, see above); 0 where it cannot be read.
  uint64_t usage = 0;
  // The cgroup directory whose limit is `limit` (logs, error messages); empty when none.
  std::string limited_by;
};

class ContainerMemoryReader {
 public:
  // Finds the memory cgroup directories of this process under `root` ("/" on a real system).
  explicit ContainerMemoryReader(std::string root = "/");

  // The current values. Cheap enough to call on every allocation (a few small files).
  ContainerMemory Read() const;

  // The directories read, from the process's cgroup up to its mount's root (tests, logs).
  const std::vector<std::string>& v1_dirs() const { return v1_dirs_; }
  const std::vector<std::string>& v2_dirs() const { return v2_dirs_; }

  // The reader of the real system ("/"), made on first use. The cgroup is looked up once:
  // a process is put into its container's cgroup before it starts.
  static const ContainerMemoryReader& Process();

 private:
  std::vector<std::string> v1_dirs_;  // leaf first.
  std::vector<std::string> v2_dirs_;  // leaf first.
};

// Limits at or above this many bytes mean "no limit" (see the header comment).
inline constexpr uint64_t kNoCgroupLimit = uint64_t{1} << 62;

}  // namespace tg

#endif  // TENSORGRID_CORE_CONTAINER_MEMORY_H_
