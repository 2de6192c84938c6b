// Context: an arena that owns tensor metadata. Graph builder functions create their result
// tensors in it; nothing is heap-allocated per tensor and everything dies with the Context.
// Not thread-safe: one thread builds a graph at a time.
#ifndef TENSORGRID_CORE_CONTEXT_H_
#define TENSORGRID_CORE_CONTEXT_H_

#include <cstdint>
#include <deque>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace tg {

// Largest tensor the core accepts (bytes); guards size arithmetic against overflow.
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 48;

class Context {
 public:
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // A new contiguous tensor of `type` with up to 4 dims (missing dims are 1). Fails on a
  // negative dim, ne[0] not a multiple of the block size, or a size over kMaxTensorBytes.
  absl::StatusOr<Tensor*> NewTensor(DType type, absl::Span<const int64_t> ne);
  // A blank tensor (all defaults) for builders and deserializers that fill it themselves.
  Tensor* NewBlank();

  int64_t size() const { return static_cast<int64_t>(tensors_.size()); }
  // All tensors in creation order (stable pointers).
  std::deque<Tensor>& tensors() { return tensors_; }

 private:
  std::deque<Tensor> tensors_;  // deque: chunked storage, stable addresses.
};

// Checks dims and the total byte size of a contiguous tensor of `type` and `ne`.
absl::Status CheckShape(DType type, const int64_t ne[kMaxDims]);

}  // namespace tg

#endif  // TENSORGRID_CORE_CONTEXT_H_
