// All-gather: every device gets the whole of a tensor split along an axis (the meta
// device's fallback when an op needs a full row it holds only a slice of, e.g. RMS_NORM
// over a cut dimension). Run by one host thread per device, like the all-reduce: directly
// between host-addressable memories, else through Buffer::Get/SetTensor; or, where the
// all-reduce only queues on the devices (RPC devices summed by their servers), as that
// all-reduce of zero-padded slices, queued like the rest of the devices' work.
// Thread-safety: one call per rank at a time, all ranks of one gather together.
#ifndef TENSORGRID_META_ALL_GATHER_H_
#define TENSORGRID_META_ALL_GATHER_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/spin_barrier.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "meta/allreduce.h"
#include "meta/split_state.h"

namespace tg::meta {

// dst[rank] (contiguous, shape of `full`) gets every device's slice src[d] (contiguous;
// nullptr where a device holds nothing) placed as `state` says. Every rank's slice must be
// ready when any rank calls. With wait_for_peers it ends with a barrier, so that no rank
// changes a slice another rank still reads; without, the caller guarantees that no rank
// writes into the slices before the ranks meet again.
absl::Status AllGatherRank(int rank, const Tensor& full, const SplitState& state,
                           absl::Span<Tensor* const> src, absl::Span<Tensor* const> dst,
                           bool force_staging, bool wait_for_peers, Barrier& barrier);

// True when GatherBySumRank can do this gather: F32, an AXIS state, contiguous tensors.
bool GathersBySum(const Tensor& full, const SplitState& state, absl::Span<Tensor* const> src,
                  absl::Span<Tensor* const> dst);
// The same gather as a sum: rank's dst is zeroed and its slice copied into place, on its
// `stream`, then `reducer` sums every dst (exact: each element has one non-zero addend).
// Nothing waits for a device when the reducer only queues (AllReducer::QueuesOnly).
absl::Status GatherBySumRank(int rank, const Tensor& full, const SplitState& state,
                             absl::Span<Tensor* const> src, absl::Span<Tensor* const> dst,
                             Stream& stream, AllReducer& reducer, bool wait_for_peers,
                             Barrier& barrier);
// Its first part, for one thread queuing every rank's work (AllReducer::Queue sums after):
// rank's dst zeroed and its slice copied into place, on its `stream`.
absl::Status PlaceSliceForSum(int rank, const Tensor& full, const SplitState& state,
                              absl::Span<Tensor* const> src, absl::Span<Tensor* const> dst,
                              Stream& stream);

}  // namespace tg::meta

#endif  // TENSORGRID_META_ALL_GATHER_H_
