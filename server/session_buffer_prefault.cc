#include "server/session_buffer_prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tg::server {
namespace {

#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack the name.
#endif

// One madvise call's range: small enough that a stop request waits at most about a
// millisecond, large enough that the calls cost nothing beside the page work.
constexpr size_t kStepBytes = size_t{4} << 20;

}  // namespace

BackgroundPrefault::BackgroundPrefault(void* data, size_t size) {
  if (data == nullptr || size < kMinBytes) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
  if (end <= begin) return;
  thread_ = std::thread([this, begin, end] {
    Run(reinterpret_cast<uint8_t*>(begin), reinterpret_cast<uint8_t*>(end));
  });
}

BackgroundPrefault::~BackgroundPrefault() {
  stop_ = true;
  Wait();
}

void BackgroundPrefault::Wait() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundPrefault::Run(uint8_t* begin, uint8_t* end) {
  for (uint8_t* p = begin; p < end && !stop_.load(std::memory_order_relaxed);) {
    const size_t n = std::min<size_t>(kStepBytes, static_cast<size_t>(end - p));
    if (madvise(p, n, MADV_POPULATE_WRITE) != 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return;  // not supported here: the pages fault in on first touch.
    }
    p += n;
    done_ += n;
  }
}

}  // namespace tg::server
