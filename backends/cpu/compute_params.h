// What a CPU kernel gets besides its node: its share of the threads and the node's scratch.
#ifndef TENSORGRID_BACKENDS_CPU_COMPUTE_PARAMS_H_
#define TENSORGRID_BACKENDS_CPU_COMPUTE_PARAMS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "backends/cpu/stealing_ranges.h"
#include "core/spin_barrier.h"

namespace tg::cpu {

// A kernel's run-time error (e.g. a row index out of range): the first one wins, and the
// stream turns it into an INVALID_ARGUMENT status after the node. Thread-safe.
struct KernelError {
  std::atomic<bool> set{false};
  char message[256] = {};
};

struct ComputeParams {
  int ith = 0;               // this thread's index in [0, nth).
  int nth = 1;               // threads working on the node.
  void* wdata = nullptr;     // scratch shared by the node's threads (size >= the op's WorkSize).
  size_t wsize = 0;
  Barrier* barrier = nullptr;  // all nth threads; nullptr when nth == 1.
  StealingRanges* ranges = nullptr;  // one per thread (ForEachShare); nullptr: static shares.

  KernelError* error = nullptr;  // where Fail() reports; never nullptr inside a stream.
  // The graph's weights are more than the last-level cache keeps between steps, so every
  // product reads its weights from DRAM (WeightsComeFromMemory).
  bool weights_from_memory = false;

  // Records a run-time error (the kernel then skips the bad item and carries on, so that all
  // threads still reach the same Sync calls).
  void Fail(const char* message) const {
    if (error == nullptr) return;
    bool expected = false;
    if (error->set.compare_exchange_strong(expected, true)) {
      std::snprintf(error->message, sizeof(error->message), "%s", message);
    }
  }

  void Sync() const {
    if (barrier != nullptr) barrier->Wait();
  }
};

// Splits [0, n) into nth near-equal chunks; returns this thread's [begin, end).
inline void SplitRange(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t per = (n + nth - 1) / nth;
  *begin = per * ith < n ? per * ith : n;
  *end = *begin + per < n ? *begin + per : n;
}

// Calls fn(begin, end, ahead_end) for this thread's share of items [0, n): with p.ranges,
// chunks of up to `chunk` items from the front of its contiguous SplitRange share, then chunks
// stolen from the back of the others' shares until every item is taken; without, its whole
// share at once. Items [end, ahead_end) are the ones this thread will likely take next (to
// prefetch). At most one call per node between two barriers (a later Reset would mix the
// calls' items).
template <typename Fn>
void ForEachShare(const ComputeParams& p, int64_t n, int64_t chunk, Fn&& fn) {
  int64_t begin, end, rest_end;
  SplitRange(n, p.ith, p.nth, &begin, &end);
  if (p.ranges == nullptr || n > StealingRanges::kMaxItems) {
    if (begin < end) fn(begin, end, end);
    return;
  }
  p.ranges->Reset(p.ith, begin, end);
  while (p.ranges->Take(p.ith, chunk, &begin, &end, &rest_end)) fn(begin, end, rest_end);
  while (p.ranges->Steal(p.ith, chunk, &begin, &end)) fn(begin, end, end);
}

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_COMPUTE_PARAMS_H_
