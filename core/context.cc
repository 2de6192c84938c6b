#include "core/context.h"

#include "absl/strings/str_format.h"

namespace tg {

absl::Status CheckShape(DType type, const int64_t ne[kMaxDims]) {
  uint64_t elements = 1;
  for (int i = 0; i < kMaxDims; ++i) {
    if (ne[i] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("dimension %d is negative (%d)", i, ne[i]));
    }
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(ne[i]), &elements) ||
        elements > kMaxTensorBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "shape %dx%dx%dx%d is too large", ne[0], ne[1], ne[2], ne[3]));
    }
  }
  if (ne[0] % BlockSize(type) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("row length %d is not a multiple of the %s block size %d", ne[0],
                        DTypeName(type), BlockSize(type)));
  }
  if (elements / BlockSize(type) * BlockBytes(type) > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor of %d elements is too large",
                                                      elements));
  }
  return absl::OkStatus();
}

Tensor* Context::NewBlank() { return &tensors_.emplace_back(); }

absl::StatusOr<Tensor*> Context::NewTensor(DType type, absl::Span<const int64_t> ne) {
  if (ne.size() > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrFormat("%d dims given, at most 4", ne.size()));
  }
  int64_t dims[kMaxDims] = {1, 1, 1, 1};
  for (size_t i = 0; i < ne.size(); ++i) dims[i] = ne[i];
  if (absl::Status s = CheckShape(type, dims); !s.ok()) return s;
  Tensor* t = NewBlank();
  t->type = type;
  std::copy(dims, dims + kMaxDims, t->ne);
  SetContiguousStrides(t);
  return t;
}

}  // namespace tg
