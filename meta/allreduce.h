// All-reduce of one F32 tensor per device (sums them, every device gets the sum), the
// collective behind tensor parallelism's PARTIAL -> MIRRORED. Uses the devices' own
// Collectives (NCCL) when every device offers the same one; otherwise a generic algorithm
// run by one host thread per device ("rank") on host memory: the tensors themselves when the
// host can address them (CPU devices), else host copies made with Buffer::Get/SetTensor:
//   ring       (reduce-scatter then all-gather, 2(n-1) steps of 1/n of the data each) for
//              large tensors: every rank moves ~2x the tensor, whatever n;
//   butterfly  (recursive doubling; with n not a power of two the extra ranks fold into a
//              partner first and get the result last) for small ones: log2(n) steps, where
//              latency, not bandwidth, is what counts.
// Optionally values cross between ranks as BF16 in the ring above a size threshold (half the
// bytes; the owner of each chunk rounds it too, so all ranks still end bit-identical).
// Every algorithm gives all ranks bit-identical sums. Thread-safety: RunRank is called
// concurrently by all ranks of one all-reduce at a time; Run by one thread at a time.
#ifndef TENSORGRID_META_ALLREDUCE_H_
#define TENSORGRID_META_ALLREDUCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/spin_barrier.h"
#include "core/thread_pool.h"

namespace tg::meta {

struct AllReduceOptions {
  enum class Algorithm { kAuto, kRing, kButterfly };
  Algorithm algorithm = Algorithm::kAuto;
  // kAuto: ring at or above this many bytes, butterfly below (measured on 2-4 CPU devices:
  // below ~64 KiB the ring's 2(n-1) barriers cost more than butterfly's extra bytes).
  size_t ring_min_bytes = size_t{64} << 10;
  // Ring transfers of tensors at least this large go as BF16. Off by default: tensor
  // parallel results then match one device's to float rounding.
  size_t bf16_min_bytes = SIZE_MAX;
  // Use the devices' Collectives when they all offer the same one.
  bool use_collectives = true;
  // Go through Buffer::Get/SetTensor even when the host can address the memory (tests the
  // path non-host devices take).
  bool force_staging = false;
};

// Process-wide counts of the generic algorithm's host staging (tools' reports: tg-run --json):
// bytes read from and written back to devices the host cannot address (a remote device's
// slice crosses the network both ways), and how many all-reduces staged. Thread-safe.
struct AllReduceTraffic {
  std::atomic<uint64_t> staged_bytes{0};
  std::atomic<uint64_t> staged{0};

  static AllReduceTraffic& Get();
};

class AllReducer {
 public:
  // INVALID_ARGUMENT for no devices.
  static absl::StatusOr<std::unique_ptr<AllReducer>> Create(std::vector<Device*> devices,
                                                            AllReduceOptions options = {});
  ~AllReducer();

  int n_ranks() const { return static_cast<int>(devices_.size()); }
  // "collectives", "ring", "ring-bf16" or "butterfly": what a tensor of `bytes` gets.
  const char* AlgorithmFor(size_t bytes) const;
  // True when RunRank only queues work on the devices' streams (Communicator::QueuesOnly).
  bool QueuesOnly() const { return communicator_ != nullptr && communicator_->QueuesOnly(); }

  // Rank `rank`'s part of summing `tensors` (one per device, in device order: F32,
  // contiguous, equal element counts) in place. All ranks call it with the same span and
  // barrier (of n_ranks()), once every rank's tensor holds its input (the caller has
  // synchronized them); every rank passes the same barriers even after an error, so a
  // failing rank never strands the others. With wait_for_peers false a rank may return
  // while others still read its tensor (never its scratch): allowed when no rank writes
  // into any of the tensors before the ranks meet again, which saves a barrier.
  absl::Status RunRank(int rank, absl::Span<Tensor* const> tensors, Barrier& barrier,
                       bool wait_for_peers = true);

  // All ranks on threads of this object's own.
  absl::Status Run(absl::Span<Tensor* const> tensors);
  // Every rank's part from this one thread, where the reducer only queues (QueuesOnly: the
  // communicator posts the whole all-reduce to every device's queue); otherwise
  // FAILED_PRECONDITION.
  absl::Status Queue(absl::Span<Tensor* const> tensors);

 private:
  explicit AllReducer(std::vector<Device*> devices, AllReduceOptions options);
  absl::Status Check(absl::Span<Tensor* const> tensors) const;
  bool HostDirect(absl::Span<Tensor* const> tensors) const;
  void Ring(int rank, size_t count, absl::Span<float* const> data, bool bf16, bool settle,
            Barrier& barrier);
  void Butterfly(int rank, size_t count, absl::Span<float* const> data, bool settle,
                 Barrier& barrier);

  std::vector<Device*> devices_;
  AllReduceOptions options_;
  std::unique_ptr<Communicator> communicator_;
  absl::Status communicator_status_;
  // Per rank, written by that rank only.
  std::vector<std::vector<float>> staging_;  // host copies (staging mode).
  std::vector<std::vector<float>> spare_;    // butterfly's second buffer.
  std::vector<std::vector<uint16_t>> wire_;  // ring-bf16 mailboxes, two per rank.
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Barrier> pool_barrier_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_ALLREDUCE_H_
