#include "meta/slice_copy.h"

#include <cstring>

#include "core/dtype.h"

namespace tg::meta {
namespace {

// Bytes taken by `n` indices along `axis` of a contiguous tensor (all lower dims included).
size_t AxisBytes(const Tensor& t, int axis, int64_t n) {
  if (axis == 0) return RowBytes(t.type, n);
  size_t bytes = RowBytes(t.type, t.ne[0]);
  for (int i = 1; i < axis; ++i) bytes *= t.ne[i];
  return bytes * n;
}

int64_t OuterCount(const Tensor& t, int axis) {
  int64_t n = 1;
  for (int i = axis + 1; i < kMaxDims; ++i) n *= t.ne[i];
  return n;
}

// Walks the (outer index, piece) blocks of device d's slice, calling fn(full_offset,
// slice_offset, bytes) for each.
template <typename Fn>
void ForEachBlock(const Tensor& full, const SplitState& state, int d, Fn fn) {
  const int axis = state.axis();
  const size_t full_stride = AxisBytes(full, axis, full.ne[axis]);
  const size_t slice_stride = AxisBytes(full, axis, state.Count(d));
  const int64_t outer = OuterCount(full, axis);
  for (int64_t o = 0; o < outer; ++o) {
    size_t slice_pos = o * slice_stride;
    for (const AxisRange& r : state.pieces(d)) {
      const size_t bytes = AxisBytes(full, axis, r.size());
      if (bytes == 0) continue;
      fn(o * full_stride + AxisBytes(full, axis, r.begin), slice_pos, bytes);
      slice_pos += bytes;
    }
  }
}

}  // namespace

size_t SliceBytes(const Tensor& full, const SplitState& state, int d) {
  return AxisBytes(full, state.axis(), state.Count(d)) * OuterCount(full, state.axis());
}

void ExtractSlice(const Tensor& full, const SplitState& state, int d, const uint8_t* full_bytes,
                  uint8_t* slice_bytes) {
  ForEachBlock(full, state, d, [&](size_t full_off, size_t slice_off, size_t bytes) {
    std::memcpy(slice_bytes + slice_off, full_bytes + full_off, bytes);
  });
}

void InsertSlice(const Tensor& full, const SplitState& state, int d, const uint8_t* slice_bytes,
                 uint8_t* full_bytes) {
  ForEachBlock(full, state, d, [&](size_t full_off, size_t slice_off, size_t bytes) {
    std::memcpy(full_bytes + full_off, slice_bytes + slice_off, bytes);
  });
}

std::vector<SliceRun> SliceRuns(const Tensor& full, const SplitState& state, int d) {
  const int axis = state.axis();
  const size_t full_stride = AxisBytes(full, axis, full.ne[axis]);
  const size_t slice_stride = AxisBytes(full, axis, state.Count(d));
  std::vector<SliceRun> runs;
  size_t slice_pos = 0;
  for (const AxisRange& r : state.pieces(d)) {
    const size_t bytes = AxisBytes(full, axis, r.size());
    if (bytes == 0) continue;
    runs.push_back({AxisBytes(full, axis, r.begin), slice_pos, bytes, OuterCount(full, axis),
                    full_stride, slice_stride});
    slice_pos += bytes;
  }
  return runs;
}

}  // namespace tg::meta
