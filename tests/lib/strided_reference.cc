#include "tests/lib/strided_reference.h"

namespace tg::testing {

std::vector<uint8_t> BytePattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>((i * 2654435761u + seed * 40503u) >> 13);
  return v;
}

std::vector<uint8_t> ReferenceSetRows(const StridedRange& r, std::vector<uint8_t> tensor,
                                      const std::vector<uint8_t>& host) {
  const size_t host_stride = r.host_stride == 0 ? r.row_size : r.host_stride;
  for (size_t i = 0; i < r.n_rows; ++i) {
    for (size_t b = 0; b < r.row_size; ++b) {
      tensor.at(r.offset + i * r.stride + b) = host.at(i * host_stride + b);
    }
  }
  return tensor;
}

std::vector<uint8_t> ReferenceGetRows(const StridedRange& r, const std::vector<uint8_t>& tensor,
                                      size_t host_bytes, uint8_t fill) {
  std::vector<uint8_t> host(host_bytes, fill);
  const size_t host_stride = r.host_stride == 0 ? r.row_size : r.host_stride;
  for (size_t i = 0; i < r.n_rows; ++i) {
    for (size_t b = 0; b < r.row_size; ++b) {
      host.at(i * host_stride + b) = tensor.at(r.offset + i * r.stride + b);
    }
  }
  return host;
}

absl::Status ForwardingBuffer::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  ++calls_1d;
  return inner_->SetTensor(t, data, offset, size);
}

absl::Status ForwardingBuffer::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  ++calls_1d;
  return inner_->GetTensor(t, data, offset, size);
}

absl::Status ForwardingBuffer::SetTensor2D(Tensor* t, const void* data, const StridedRange& r) {
  if (!native_2d_) return Buffer::SetTensor2D(t, data, r);
  ++calls_2d;
  return inner_->SetTensor2D(t, data, r);
}

absl::Status ForwardingBuffer::GetTensor2D(const Tensor* t, void* data, const StridedRange& r) {
  if (!native_2d_) return Buffer::GetTensor2D(t, data, r);
  ++calls_2d;
  return inner_->GetTensor2D(t, data, r);
}

}  // namespace tg::testing
