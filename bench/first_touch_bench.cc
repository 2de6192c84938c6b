// first_touch_bench: what fresh memory costs this machine, the floor under a cold model load
// (every byte of a new weight buffer is touched once). Allocates SIZE MiB, touches it first
// by writing (memset) or by MADV_POPULATE_WRITE, optionally asking for transparent huge
// pages (MADV_HUGEPAGE), then writes it again; frees it and repeats ROUNDS times in the same
// process. The first round of a fresh process gets memory the kernel may have handed back to
// the hypervisor (free page reporting); later rounds get what the round before freed.
//
//   first_touch_bench [SIZE_MIB [4k|thp [memset|populate [ROUNDS]]]]   (620 4k memset 3)
//
// Prints one line a round: first touch in s and GB/s, then the second touch (memory in place).
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Usage() {
  std::fprintf(stderr, "usage: first_touch_bench [SIZE_MIB [4k|thp [memset|populate [ROUNDS]]]]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const long mib = argc > 1 ? std::atol(argv[1]) : 620;
  const std::string pages = argc > 2 ? argv[2] : "4k";
  const std::string touch = argc > 3 ? argv[3] : "memset";
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  if (mib <= 0 || rounds <= 0 || (pages != "4k" && pages != "thp") ||
      (touch != "memset" && touch != "populate")) {
    return Usage();
  }
  const size_t bytes = static_cast<size_t>(mib) << 20;
  constexpr size_t kHugePage = size_t{2} << 20;
  for (int round = 0; round < rounds; ++round) {
    void* p = nullptr;
    if (posix_memalign(&p, kHugePage, bytes) != 0) {
      std::fprintf(stderr, "first_touch_bench: cannot allocate %ld MiB\n", mib);
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    if (pages == "thp" && madvise(p, bytes, MADV_HUGEPAGE) != 0) {
      std::fprintf(stderr, "first_touch_bench: madvise(MADV_HUGEPAGE): %s\n", std::strerror(errno));
      return 1;
    }
    if (touch == "populate") {
      if (madvise(p, bytes, MADV_POPULATE_WRITE) != 0) {
        std::fprintf(stderr, "first_touch_bench: madvise(MADV_POPULATE_WRITE): %s\n",
                     std::strerror(errno));
        return 1;
      }
    } else {
      std::memset(p, 1, bytes);
    }
    const double first = Seconds(start);
    const auto again = std::chrono::steady_clock::now();
    std::memset(p, 2, bytes);
    const double second = Seconds(again);
    std::printf(
        "%ld MiB %s %s round %d: first touch %.3f s (%.2f GB/s), second %.3f s (%.2f GB/s)\n", mib,
        pages.c_str(), touch.c_str(), round + 1, first, bytes / first / 1e9, second,
        bytes / second / 1e9);
    std::free(p);
  }
  return 0;
}
