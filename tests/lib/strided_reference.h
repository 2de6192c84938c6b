// Helpers for the tests of 2D (strided) copies (core/strided_range.h): hand-written byte
// loops for what Set/GetTensor2D must do, written apart from core/strided_range.cc (one byte
// at a time, no memcpy); a byte pattern that is not periodic, so that a byte read from the
// wrong place differs; and a buffer that forwards to another, counting its calls, that can
// pass for device memory and can leave 2D to core/backend.h's default row loop.
#ifndef TENSORGRID_TESTS_LIB_STRIDED_REFERENCE_H_
#define TENSORGRID_TESTS_LIB_STRIDED_REFERENCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend.h"

namespace tg::testing {

std::vector<uint8_t> BytePattern(size_t n, uint32_t seed);

// `tensor` after writing `host` (r's host layout) through r.
std::vector<uint8_t> ReferenceSetRows(const StridedRange& r, std::vector<uint8_t> tensor,
                                      const std::vector<uint8_t>& host);
// `host_bytes` bytes of `fill`, with r's rows of `tensor` read into them (r's host layout).
std::vector<uint8_t> ReferenceGetRows(const StridedRange& r, const std::vector<uint8_t>& tensor,
                                      size_t host_bytes, uint8_t fill);

// Forwards every call to `inner`. `type` (may be null: inner's) is what type() says, e.g. a
// type that is not host memory; without `native_2d` the 2D calls are Buffer's row loop.
// Counts the 1D Set/GetTensor calls and the native 2D calls.
class ForwardingBuffer : public Buffer {
 public:
  ForwardingBuffer(std::unique_ptr<Buffer> inner, BufferType* type, bool native_2d)
      : inner_(std::move(inner)), type_(type), native_2d_(native_2d) {}
  BufferType* type() const override { return type_ != nullptr ? type_ : inner_->type(); }
  void* base() const override { return inner_->base(); }
  size_t size() const override { return inner_->size(); }
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status SetTensor2D(Tensor* t, const void* data, const StridedRange& r) override;
  absl::Status GetTensor2D(const Tensor* t, void* data, const StridedRange& r) override;
  absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) override {
    return inner_->MemsetTensor(t, value, offset, size);
  }
  absl::Status Clear(uint8_t value) override { return inner_->Clear(value); }

  int calls_1d = 0;
  int calls_2d = 0;

 private:
  std::unique_ptr<Buffer> inner_;
  BufferType* type_;
  bool native_2d_;
};

}  // namespace tg::testing

#endif  // TENSORGRID_TESTS_LIB_STRIDED_REFERENCE_H_
