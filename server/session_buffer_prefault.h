// BackgroundPrefault: faults a fresh host buffer's pages in on a thread of its own, ahead of
// the upload or model-file read that fills it. A first touch page by page (one page fault
// per 4 KiB) was the largest cost of a load into fresh memory (perf: 28% of a --model-dir
// load); madvise(MADV_POPULATE_WRITE) maps the same pages in bulk at about half the cost per
// page and off the thread that copies the bytes. It changes no byte (pages come in zeroed and
// a page already there is left alone), so writers need not wait for it; where the kernel
// refuses (before Linux 5.14, memory that is not plain anonymous memory) it stops quietly and
// the pages fault in on first touch as before. Thread-safe: the destructor stops the thread
// (between two steps) and joins it, and must run before the memory is freed.
#ifndef TENSORGRID_SERVER_SESSION_BUFFER_PREFAULT_H_
#define TENSORGRID_SERVER_SESSION_BUFFER_PREFAULT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace tg::server {

class BackgroundPrefault {
 public:
  // Buffers smaller than this fault in quickly enough on first touch; a thread is not worth it.
  static constexpr size_t kMinBytes = size_t{32} << 20;

  // Starts faulting in the whole pages of [data, data + size) when size >= kMinBytes.
  BackgroundPrefault(void* data, size_t size);
  ~BackgroundPrefault();
  BackgroundPrefault(const BackgroundPrefault&) = delete;
  BackgroundPrefault& operator=(const BackgroundPrefault&) = delete;

  // Bytes faulted in so far (tests).
  uint64_t done_bytes() const { return done_.load(); }
  // Waits until the thread is done (tests).
  void Wait();

 private:
  void Run(uint8_t* begin, uint8_t* end);

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> done_{0};
  std::thread thread_;
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_SESSION_BUFFER_PREFAULT_H_
