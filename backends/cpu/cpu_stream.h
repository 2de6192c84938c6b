// CpuStream: runs graphs on the host with a persistent thread pool. All threads walk the
// nodes together and meet at a barrier after each one (as ggml's CPU backend does); each
// kernel splits its node's work among them. Synchronous: Compute returns when done.
#ifndef TENSORGRID_BACKENDS_CPU_CPU_STREAM_H_
#define TENSORGRID_BACKENDS_CPU_CPU_STREAM_H_

#include <memory>
#include <vector>

#include "backends/cpu/stealing_ranges.h"
#include "core/backend.h"
#include "core/spin_barrier.h"
#include "core/thread_pool.h"

namespace tg::cpu {

class CpuStream : public Stream {
 public:
  CpuStream(Device* device, int n_threads);
  Device* device() const override { return device_; }
  absl::Status CopyTensorAsync(const Tensor* src, Tensor* dst) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::Status Compute(Graph& graph) override;

  int n_threads() const { return pool_.size(); }

 private:
  // Scratch bytes the graph's most demanding node needs.
  size_t WorkSize(const Graph& graph) const;

  Device* device_;
  ThreadPool pool_;
  Barrier barrier_;
  StealingRanges ranges_;       // one per thread, for the nodes that balance their items.
  std::vector<uint8_t> wdata_;  // grows to the largest graph's need; never shrinks.
};

}  // namespace tg::cpu

#endif  // TENSORGRID_BACKENDS_CPU_CPU_STREAM_H_
