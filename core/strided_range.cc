#include "core/strided_range.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace tg {
namespace {

// (n_rows - 1) * stride + row_size, refusing overlapping rows and overflow. `side` names
// the stride in the messages ("stride" or "host stride").
absl::StatusOr<size_t> Span(size_t row_size, size_t n_rows, size_t stride, const char* side) {
  if (n_rows == 0) return 0;
  if (n_rows > 1 && stride < row_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d rows of %d bytes overlap at a %s of %d bytes (it must be >= the "
                        "row size)",
                        n_rows, row_size, side, stride));
  }
  const size_t steps = n_rows - 1;
  if (steps > 0 && stride > (SIZE_MAX - row_size) / steps) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d rows of %d bytes at a %s of %d bytes overflow the address space",
                        n_rows, row_size, side, stride));
  }
  return steps * stride + row_size;
}

}  // namespace

absl::StatusOr<size_t> TensorSpan(const StridedRange& r) {
  return Span(r.row_size, r.n_rows, r.stride, "stride");
}

absl::StatusOr<size_t> HostSpan(const StridedRange& r) {
  return Span(r.row_size, r.n_rows, r.HostStride(), "host stride");
}

absl::StatusOr<size_t> PackedBytes(const StridedRange& r) {
  if (r.row_size != 0 && r.n_rows > SIZE_MAX / r.row_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d rows of %d bytes overflow the address space", r.n_rows, r.row_size));
  }
  return r.n_rows * r.row_size;
}

std::optional<StridedRange> TensorRows(const Tensor& t) {
  if (t.NumBytes() == 0 || t.nb[0] != BlockBytes(t.type)) return std::nullopt;
  StridedRange r;
  r.row_size = RowBytes(t.type, t.ne[0]);
  r.n_rows = 1;
  r.stride = r.row_size;
  for (int i = 1; i < kMaxDims; ++i) {
    if (t.ne[i] == 1) continue;
    const size_t n = static_cast<size_t>(t.ne[i]);
    if (r.n_rows == 1) {
      r.stride = t.nb[i];
    } else if (t.nb[i] != r.stride * r.n_rows) {
      return std::nullopt;
    }
    r.n_rows *= n;
  }
  if (r.n_rows > 1 && r.stride < r.row_size) return std::nullopt;
  return r;
}

void CopyRows(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_size,
              size_t n_rows) {
  if (row_size == 0 || n_rows == 0) return;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (dst_stride == row_size && src_stride == row_size) {
    std::memcpy(d, s, row_size * n_rows);
    return;
  }
  for (size_t i = 0; i < n_rows; ++i) std::memcpy(d + i * dst_stride, s + i * src_stride, row_size);
}

}  // namespace tg
