// Byte-level copies between a whole contiguous tensor and one device's dense slice of it in
// an AXIS split state (pieces stored back to back): the host side of scatter (SetTensor of a
// split weight), gather (GetTensor of split logits) and the all-gather between devices whose
// memory the host can address. Works for every type (axis-0 cuts fall on whole blocks, as
// SplitState::Validate demands). Pure functions, thread-safe.
#ifndef TENSORGRID_META_SLICE_COPY_H_
#define TENSORGRID_META_SLICE_COPY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "meta/split_state.h"

namespace tg::meta {

// Bytes of device d's slice of `full` (contiguous) in `state` (an AXIS state).
size_t SliceBytes(const Tensor& full, const SplitState& state, int d);

// full_bytes (the whole tensor, contiguous) -> slice_bytes (device d's dense slice).
void ExtractSlice(const Tensor& full, const SplitState& state, int d, const uint8_t* full_bytes,
                  uint8_t* slice_bytes);

// slice_bytes (device d's dense slice) -> its place in full_bytes.
void InsertSlice(const Tensor& full, const SplitState& state, int d, const uint8_t* slice_bytes,
                 uint8_t* full_bytes);

// One piece of device d's slice as strided rows: `rows` runs of `bytes` each, run o at byte
// full_offset + o * full_stride of the whole tensor and slice_offset + o * slice_stride of the
// slice (both contiguous).
struct SliceRun {
  size_t full_offset = 0;
  size_t slice_offset = 0;
  size_t bytes = 0;
  int64_t rows = 0;
  size_t full_stride = 0;
  size_t slice_stride = 0;
};
// Device d's pieces of an AXIS state, in the order the slice stores them (empty ones left out).
std::vector<SliceRun> SliceRuns(const Tensor& full, const SplitState& state, int d);

}  // namespace tg::meta

#endif  // TENSORGRID_META_SLICE_COPY_H_
