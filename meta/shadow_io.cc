#include "meta/shadow_io.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backend.h"
#include "core/status_macros.h"
#include "meta/slice_copy.h"

namespace tg::meta {
namespace {

absl::Status CheckShadow(const Tensor& full, const Tensor* shadow) {
  if (shadow->buffer == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("shadow of ", DescribeTensor(full), " has no memory"));
  }
  if (!shadow->IsContiguous()) {
    return absl::UnimplementedError(
        absl::StrCat("shadow of ", DescribeTensor(full), " is not contiguous"));
  }
  return absl::OkStatus();
}

// Index of the first device that holds something, or -1.
int FirstHolder(const ShadowSet& set) {
  for (size_t d = 0; d < set.shadows.size(); ++d) {
    if (set.shadows[d] != nullptr) return static_cast<int>(d);
  }
  return -1;
}

}  // namespace

absl::Status ScatterToShadows(const Tensor& full, const ShadowSet& set, const uint8_t* bytes) {
  const size_t total = full.NumBytes();
  const int first = FirstHolder(set);
  std::vector<uint8_t> slice;
  for (size_t d = 0; d < set.shadows.size(); ++d) {
    Tensor* s = set.shadows[d];
    if (s == nullptr) continue;
    TG_RETURN_IF_ERROR(CheckShadow(full, s));
    switch (set.state.kind()) {
      case SplitKind::kMirrored:
        TG_RETURN_IF_ERROR(s->buffer->SetTensor(s, bytes, 0, total));
        break;
      case SplitKind::kPartial:
        if (static_cast<int>(d) == first) {
          TG_RETURN_IF_ERROR(s->buffer->SetTensor(s, bytes, 0, total));
        } else {
          TG_RETURN_IF_ERROR(s->buffer->MemsetTensor(s, 0, 0, total));
        }
        break;
      case SplitKind::kAxis:
        slice.resize(SliceBytes(full, set.state, static_cast<int>(d)));
        ExtractSlice(full, set.state, static_cast<int>(d), bytes, slice.data());
        TG_RETURN_IF_ERROR(s->buffer->SetTensor(s, slice.data(), 0, slice.size()));
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status GatherFromShadows(const Tensor& full, const ShadowSet& set, uint8_t* bytes) {
  const size_t total = full.NumBytes();
  const int first = FirstHolder(set);
  if (set.state.is_mirrored()) {
    if (first < 0) return absl::InternalError("mirrored tensor without shadows");
    Tensor* s = set.shadows[first];
    TG_RETURN_IF_ERROR(CheckShadow(full, s));
    return s->buffer->GetTensor(s, bytes, 0, total);
  }
  if (set.state.is_partial()) {
    if (full.type != DType::kF32) {
      return absl::UnimplementedError(
          absl::StrCat("reading partial sums of non-f32 ", DescribeTensor(full)));
    }
    std::memset(bytes, 0, total);
    std::vector<float> part(total / sizeof(float));
    auto* sum = reinterpret_cast<float*>(bytes);
    for (Tensor* s : set.shadows) {
      if (s == nullptr) continue;
      TG_RETURN_IF_ERROR(CheckShadow(full, s));
      TG_RETURN_IF_ERROR(s->buffer->GetTensor(s, part.data(), 0, total));
      for (size_t i = 0; i < part.size(); ++i) sum[i] += part[i];
    }
    return absl::OkStatus();
  }
  // Cut along the outermost dimension (logits by vocabulary row): each slice is one run of
  // the whole tensor and lands in place.
  bool one_run = !set.state.segmented();
  for (int i = set.state.axis() + 1; i < kMaxDims; ++i) one_run = one_run && full.ne[i] == 1;
  std::vector<uint8_t> slice;
  for (size_t d = 0; d < set.shadows.size(); ++d) {
    Tensor* s = set.shadows[d];
    if (s == nullptr) continue;
    TG_RETURN_IF_ERROR(CheckShadow(full, s));
    const int dev = static_cast<int>(d);
    const size_t size = SliceBytes(full, set.state, dev);
    if (one_run) {
      const int axis = set.state.axis();
      const int64_t begin = set.state.range(dev).begin;
      const size_t offset = axis == 0 ? RowBytes(full.type, begin) : begin * full.nb[axis];
      TG_RETURN_IF_ERROR(s->buffer->GetTensor(s, bytes + offset, 0, size));
      continue;
    }
    slice.resize(size);
    TG_RETURN_IF_ERROR(s->buffer->GetTensor(s, slice.data(), 0, slice.size()));
    InsertSlice(full, set.state, dev, slice.data(), bytes);
  }
  return absl::OkStatus();
}

absl::Status MemsetShadows(const ShadowSet& set, uint8_t value) {
  const int first = FirstHolder(set);
  for (size_t d = 0; d < set.shadows.size(); ++d) {
    Tensor* s = set.shadows[d];
    if (s == nullptr) continue;
    const bool zero = set.state.is_partial() && static_cast<int>(d) != first;
    TG_RETURN_IF_ERROR(s->buffer->MemsetTensor(s, zero ? 0 : value, 0, s->NumBytes()));
  }
  return absl::OkStatus();
}

}  // namespace tg::meta
