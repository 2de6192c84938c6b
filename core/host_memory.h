// The host memory this process may use, judged as the kernel will: the physical memory or the
// container's limit where that is less (core/container_memory.h), and what of it is still
// available. Every judgment of host memory goes through these: the CPU device's free memory
// (by which a client splits layers), an rpc-server's Hello, its budget and its host reserve.
// Thread-safe.
#ifndef TENSORGRID_CORE_HOST_MEMORY_H_
#define TENSORGRID_CORE_HOST_MEMORY_H_

#include <cstdint>

namespace tg {

// The host's physical memory, and what the kernel can still hand out without swapping
// (/proc/meminfo's MemAvailable: free pages plus reclaimable page cache; the free pages
// where that file cannot be read).
uint64_t PhysicalMemoryTotal();
uint64_t PhysicalMemoryAvailable();

// The memory this process may use: the physical memory, or its container's limit where that
// is less; and what of it is still available: the least of MemAvailable and the container's
// headroom (limit less its working set). Both come from a reading at most 10 ms old
// (reading the files costs more than a small allocation).
uint64_t HostMemoryTotal();
uint64_t HostMemoryAvailable();

// Whether this kernel backs memory that asks for it (madvise MADV_HUGEPAGE) with 2 MiB pages:
// transparent huge pages present and not set to "never". Read once.
bool TransparentHugePagesUsable();

}  // namespace tg

#endif  // TENSORGRID_CORE_HOST_MEMORY_H_
