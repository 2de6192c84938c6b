#include "meta/all_gather.h"

#include <vector>

#include "core/backend.h"
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

}  // namespace tg::meta
