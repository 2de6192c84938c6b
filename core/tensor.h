// Tensor: the node of every graph. Metadata only; data lives in a backend Buffer.
// Tensors are created by a Context (arena) and by the graph builder functions in ops.h.
// Not thread-safe to mutate; immutable tensors may be read from any thread.
#ifndef TENSORGRID_CORE_TENSOR_H_
#define TENSORGRID_CORE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include "absl/strings/string_view.h"

#include "core/dtype.h"
#include "core/op.h"

namespace tg {

class Buffer;

inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSrc = 4;
inline constexpr int kMaxOpParams = 16;  // int32 slots.
inline constexpr int kMaxName = 64;

enum TensorFlag : uint32_t {
  kFlagInput = 1u << 0,   // set by the caller before compute (the allocator gives it its own memory).
  kFlagOutput = 1u << 1,  // read back after compute (never reused by the allocator).
  kFlagWeight = 1u << 2,  // model weight: pins its consumers to the weight's device.
};

struct Tensor {
  DType type = DType::kF32;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // elements per dimension, innermost first.
  size_t nb[kMaxDims] = {0, 0, 0, 0};   // stride in bytes per dimension (nb[0] = block bytes).
  Op op = Op::kNone;
  int32_t op_params[kMaxOpParams] = {};
  Tensor* src[kMaxSrc] = {};
  Tensor* view_src = nullptr;  // the tensor whose memory a view aliases.
  size_t view_offs = 0;        // byte offset into view_src's data.
  Buffer* buffer = nullptr;    // the buffer holding data (nullptr until allocated).
  void* data = nullptr;        // address inside buffer (host or device address space).
  uint32_t flags = 0;
  char name[kMaxName] = {};

  int64_t NumElements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t NumRows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes spanned from the first to the last element (what a buffer must hold).
  size_t NumBytes() const;
  size_t RowBytes() const { return tg::RowBytes(type, ne[0]); }
  // Rows packed densely one after another in memory, in dimension order.
  bool IsContiguous() const;
  // Elements of each row packed densely (nb[0] is the block size), rows anywhere.
  bool RowsContiguous() const { return nb[0] == BlockBytes(type); }
  bool IsView() const { return view_src != nullptr; }
  bool HasFlag(TensorFlag f) const { return (flags & f) != 0; }

  float ParamF32(int i) const {
    float f;
    std::memcpy(&f, &op_params[i], 4);
    return f;
  }
  void SetParamF32(int i, float f) { std::memcpy(&op_params[i], &f, 4); }
  absl::string_view Name() const { return name; }
  void SetName(absl::string_view n);
};

// Fills nb[] for a densely packed tensor of t->type and t->ne.
void SetContiguousStrides(Tensor* t);
bool SameShape(const Tensor& a, const Tensor& b);
// "name[f32 4x3x1x1]" for error messages and logs.
std::string DescribeTensor(const Tensor& t);

}  // namespace tg

#endif  // TENSORGRID_CORE_TENSOR_H_
