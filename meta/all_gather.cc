#include "meta/all_gather.h"

#include <algorithm>
#include <vector>

#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "meta/slice_copy.h"

namespace tg::meta {
namespace {

absl::Status GatherStaged(int rank, const Tensor& full, const SplitState& state,
                          absl::Span<Tensor* const> src, Tensor* out) {
  std::vector<uint8_t> whole(full.NumBytes());
  std::vector<uint8_t> slice;
  for (size_t d = 0; d < src.size(); ++d) {
    if (src[d] == nullptr) continue;
    slice.resize(SliceBytes(full, state, static_cast<int>(d)));
    absl::Status s = src[d]->buffer->GetTensor(src[d], slice.data(), 0, slice.size());
    if (!s.ok()) return s;
    InsertSlice(full, state, static_cast<int>(d), slice.data(), whole.data());
  }
  return out->buffer->SetTensor(out, whole.data(), 0, whole.size());
}

}  // namespace

absl::Status AllGatherRank(int rank, const Tensor& full, const SplitState& state,
                           absl::Span<Tensor* const> src, absl::Span<Tensor* const> dst,
                           bool force_staging, bool wait_for_peers, Barrier& barrier) {
  Tensor* out = dst[rank];
  bool direct = !force_staging && out->buffer->type()->is_host();
  for (Tensor* s : src) direct = direct && (s == nullptr || s->buffer->type()->is_host());
  absl::Status status;
  if (direct) {
    for (size_t d = 0; d < src.size(); ++d) {
      if (src[d] == nullptr) continue;
      InsertSlice(full, state, static_cast<int>(d), static_cast<const uint8_t*>(src[d]->data),
                  static_cast<uint8_t*>(out->data));
    }
  } else {
    status = GatherStaged(rank, full, state, src, out);
  }
  if (wait_for_peers) barrier.Wait();
  return status;
}

bool GathersBySum(const Tensor& full, const SplitState& state, absl::Span<Tensor* const> src,
                  absl::Span<Tensor* const> dst) {
  if (full.type != DType::kF32 || !state.is_axis()) return false;
  for (const Tensor* t : dst) {
    if (t == nullptr || t->type != DType::kF32 || !t->IsContiguous() ||
        t->NumElements() != full.NumElements()) {
      return false;
    }
  }
  for (const Tensor* t : src) {
    if (t != nullptr && (t->type != DType::kF32 || !t->IsContiguous())) return false;
  }
  return true;
}

absl::Status PlaceSliceForSum(int rank, const Tensor& full, const SplitState& state,
                              absl::Span<Tensor* const> src, absl::Span<Tensor* const> dst,
                              Stream& stream) {
  Tensor* out = dst[rank];
  absl::Status status = out->buffer->MemsetTensor(out, 0, 0, out->NumBytes());
  if (status.ok() && src[rank] != nullptr && state.Count(rank) > 0) {
    status = [&]() -> absl::Status {
      // Each piece of the slice (stored back to back along the axis in src) is CPYed into a
      // view of dst at its place. dst is packed with full's elements (its own shape may
      // differ): views take full's shape and packed strides.
      const int axis = state.axis();
      int64_t slice_ne[kMaxDims], piece_ne[kMaxDims];
      std::copy(full.ne, full.ne + kMaxDims, slice_ne);
      slice_ne[axis] = state.Count(rank);
      size_t full_nb[kMaxDims] = {sizeof(float)}, slice_nb[kMaxDims] = {sizeof(float)};
      for (int i = 1; i < kMaxDims; ++i) {
        full_nb[i] = full_nb[i - 1] * static_cast<size_t>(full.ne[i - 1]);
        slice_nb[i] = slice_nb[i - 1] * static_cast<size_t>(slice_ne[i - 1]);
      }
      Context ctx;
      // The graph is these views and copies only: src and dst are its leafs, whatever op
      // made them (BuildGraph would pull in, and run again, everything src came from).
      Graph graph;
      int64_t stored = 0;  // elements along the axis of the pieces before this one.
      for (const AxisRange& piece : state.pieces(rank)) {
        std::copy(full.ne, full.ne + kMaxDims, piece_ne);
        piece_ne[axis] = piece.end - piece.begin;
        if (piece_ne[axis] == 0) continue;
        TG_ASSIGN_OR_RETURN(Tensor * from,
                            View(ctx, src[rank], piece_ne, {slice_nb[1], slice_nb[2], slice_nb[3]},
                                 stored * slice_nb[axis]));
        TG_ASSIGN_OR_RETURN(Tensor * to,
                            View(ctx, out, piece_ne, {full_nb[1], full_nb[2], full_nb[3]},
                                 piece.begin * full_nb[axis]));
        TG_ASSIGN_OR_RETURN(Tensor * copy, Cpy(ctx, from, to));
        for (Tensor* t : {from, to, copy}) {
          TG_RETURN_IF_ERROR(PlaceView(t));
          graph.nodes.push_back(t);
        }
        stored += piece_ne[axis];
      }
      return stream.Compute(graph);
    }();
  }
  return status;
}

absl::Status GatherBySumRank(int rank, const Tensor& full, const SplitState& state,
                             absl::Span<Tensor* const> src, absl::Span<Tensor* const> dst,
                             Stream& stream, AllReducer& reducer, bool wait_for_peers,
                             Barrier& barrier) {
  absl::Status status = PlaceSliceForSum(rank, full, state, src, dst, stream);
  // Every rank passes the reducer's barriers, whatever happened here.
  absl::Status summed = reducer.RunRank(rank, dst, barrier, wait_for_peers);
  return status.ok() ? summed : status;
}

}  // namespace tg::meta
