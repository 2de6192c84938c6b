// The items of a node's work, split into one contiguous range per thread: each thread takes
// chunks from the front of its own range, and once that is empty steals chunks from the back
// of the others'. A thread whose core runs slower for a while (a shared host, another tenant's
// memory traffic) then no longer holds up the node's barrier, while each thread still reads a
// contiguous run of weights. Thread-safe: Reset by the owner, Take/Steal by any thread, all
// between the same two barriers.
#ifndef TENSORGRID_BACKENDS_CPU_STEALING_RANGES_H_
#define TENSORGRID_BACKENDS_CPU_STEALING_RANGES_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace tg::cpu {

class StealingRanges {
 public:
  // Ranges of at most kMaxItems items (their ends are packed into one 64-bit word).
  static constexpr int64_t kMaxItems = int64_t{1} << 31;

  explicit StealingRanges(int n_threads)
      : n_(n_threads), slots_(std::make_unique<Slot[]>(n_threads)) {}
  StealingRanges(const StealingRanges&) = delete;
  StealingRanges& operator=(const StealingRanges&) = delete;

  int size() const { return n_; }

  // Thread `ith`'s range for this node: [begin, end), end - begin <= kMaxItems. Called by the
  // owner before it takes from it; every range is empty again once all its items are taken,
  // so a thread that steals before the owner's Reset finds nothing there, as it should.
  void Reset(int ith, int64_t begin, int64_t end) {
    slots_[ith].base.store(begin, std::memory_order_relaxed);
    slots_[ith].range.store(Pack(0, end - begin), std::memory_order_release);
  }

  // Up to n items from the front of thread `ith`'s own range into [*begin, *end), and in
  // *rest_end where what is left of the range ends (the owner's likely next items, unless
  // stolen meanwhile); false when it is empty.
  bool Take(int ith, int64_t n, int64_t* begin, int64_t* end, int64_t* rest_end) {
    Slot& s = slots_[ith];
    uint64_t word = s.range.load(std::memory_order_acquire);
    while (true) {
      const int64_t front = Front(word), back = Back(word);
      if (front >= back) return false;
      const int64_t to = front + n < back ? front + n : back;
      if (s.range.compare_exchange_weak(word, Pack(to, back), std::memory_order_acq_rel)) {
        const int64_t base = s.base.load(std::memory_order_relaxed);
        *begin = base + front;
        *end = base + to;
        *rest_end = base + back;
        return true;
      }
    }
  }

  // Up to n items from the back of another thread's range, trying each other thread in turn
  // after `thief`; false when all are empty.
  bool Steal(int thief, int64_t n, int64_t* begin, int64_t* end) {
    for (int d = 1; d < n_; ++d) {
      Slot& s = slots_[(thief + d) % n_];
      uint64_t word = s.range.load(std::memory_order_acquire);
      while (Front(word) < Back(word)) {
        const int64_t front = Front(word), back = Back(word);
        const int64_t from = back - n > front ? back - n : front;
        if (s.range.compare_exchange_weak(word, Pack(front, from), std::memory_order_acq_rel)) {
          const int64_t base = s.base.load(std::memory_order_relaxed);
          *begin = base + from;
          *end = base + back;
          return true;
        }
      }
    }
    return false;
  }

 private:
  static uint64_t Pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(back);
  }
  static int64_t Front(uint64_t word) { return static_cast<int64_t>(word >> 32); }
  static int64_t Back(uint64_t word) { return static_cast<int64_t>(word & 0xffffffffu); }

  struct alignas(64) Slot {
    std::atomic<uint64_t> range{0};  // front (high half) and back, relative to base.
    std::atomic<int64_t> base{0};  // written before range, read after it.
  };

  const int n_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_STEALING_RANGES_H_
