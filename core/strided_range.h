// StridedRange: the 2D (strided) byte range of Buffer::Set/GetTensor2D and their stream
// forms (ggml's set/get_tensor_2d): `n_rows` rows of `row_size` bytes, row i at byte
// offset + i * stride of the tensor and at byte i * HostStride() of host memory. One call
// moves a view of a tensor (a column slice, one head of a cache) instead of one per row; the
// RPC protocol carries it as one message. Also the checks and the strided memcpy shared by
// host-memory buffers, the RPC client and rpc-server. Value type and pure functions:
// thread-safe.
#ifndef TENSORGRID_CORE_STRIDED_RANGE_H_
#define TENSORGRID_CORE_STRIDED_RANGE_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tg {

struct StridedRange {
  size_t offset = 0;       // row 0's byte offset in the tensor.
  size_t row_size = 0;     // bytes per row.
  size_t n_rows = 0;       // 0 moves nothing.
  size_t stride = 0;       // bytes between rows in the tensor; >= row_size if n_rows > 1.
  size_t host_stride = 0;  // bytes between rows in host memory; 0: packed (row_size).

  size_t HostStride() const { return host_stride == 0 ? row_size : host_stride; }
  // True when the rows are back to back in the tensor: one 1D copy of PackedBytes() does.
  bool TensorContiguous() const { return n_rows <= 1 || stride == row_size; }
};

// Bytes from the first row's start to the last row's end in the tensor (0 for no rows).
// INVALID_ARGUMENT naming the values when rows overlap (stride < row_size) or it overflows.
absl::StatusOr<size_t> TensorSpan(const StridedRange& r);
// The same on the host side (host_stride).
absl::StatusOr<size_t> HostSpan(const StridedRange& r);
// n_rows * row_size: the bytes moved, which is what the rows take packed (overflow checked).
absl::StatusOr<size_t> PackedBytes(const StridedRange& r);

// Copies n_rows rows of row_size bytes from src (rows src_stride apart) to dst (rows
// dst_stride apart); one memcpy when both sides are packed. The ranges must not overlap.
void CopyRows(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_size,
              size_t n_rows);

// t's bytes as one 2D range from t->data (offset 0): rows of ne[0] elements stored back to
// back, evenly spaced (dims 1..3 fold into one). nullopt when they do not fold (a permuted
// or broadcast view), and then the whole byte span is what a copy moves.
std::optional<StridedRange> TensorRows(const Tensor& t);

// Host address of row i of `data` in r's host layout.
inline const uint8_t* HostRow(const void* data, const StridedRange& r, size_t i) {
  return static_cast<const uint8_t*>(data) + i * r.HostStride();
}
inline uint8_t* HostRow(void* data, const StridedRange& r, size_t i) {
  return static_cast<uint8_t*>(data) + i * r.HostStride();
}

}  // namespace tg

#endif  // TENSORGRID_CORE_STRIDED_RANGE_H_
