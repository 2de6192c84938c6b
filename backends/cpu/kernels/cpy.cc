// CPY and CONT: element k of src0 (logical order) goes to element k of dst, converted to
// dst's type. dst is either a view of CPY's src1 or CONT's new contiguous tensor.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_convert.h"

namespace tg::cpu {
namespace {

constexpr int64_t kCopyGrain = 64;  // bytes: threads split a memcpy on cache-line bounds.

// A position in a tensor walked in logical order (dim 0 fastest).
class Cursor {
 public:
  Cursor(const Tensor& t, int64_t k) : t_(t) {
    for (int d = 0; d < kMaxDims; ++d) {
      i_[d] = k % t.ne[d];
      k /= t.ne[d];
    }
  }
  int64_t LeftInRow() const { return t_.ne[0] - i_[0]; }
  // Address of the current element (quantized rows are only ever entered at i0 == 0).
  uint8_t* Address() const {
    const size_t row = i_[1] * t_.nb[1] + i_[2] * t_.nb[2] + i_[3] * t_.nb[3];
    const size_t col = IsQuantized(t_.type) ? 0 : i_[0] * t_.nb[0];
    return static_cast<uint8_t*>(t_.data) + row + col;
  }
  // Moves n elements on; n never crosses the end of the current row.
  void Advance(int64_t n) {
    i_[0] += n;
    for (int d = 0; d + 1 < kMaxDims && i_[d] == t_.ne[d]; ++d) {
      i_[d] = 0;
      ++i_[d + 1];
    }
  }

 private:
  const Tensor& t_;
  int64_t i_[kMaxDims];
};

void ParallelMemcpy(const ComputeParams& p, void* dst, const void* src, int64_t bytes) {
  int64_t begin, end;
  SplitRange((bytes + kCopyGrain - 1) / kCopyGrain, p.ith, p.nth, &begin, &end);
  begin *= kCopyGrain;
  end = std::min(end * kCopyGrain, bytes);
  if (begin < end) {
    // memmove: a graph from the network may alias source and destination; the result is
    // then unspecified but the copy stays defined behaviour.
    std::memmove(static_cast<uint8_t*>(dst) + begin, static_cast<const uint8_t*>(src) + begin,
                 end - begin);
  }
}

}  // namespace

// Threads split the elements (whole rows when a side is quantized, since rows then map 1:1);
// each range is copied as runs that are contiguous in both tensors' rows.
void ComputeCpy(const ComputeParams& p, Tensor* dst) {
  const Tensor& a = *dst->src[0];
  if (a.type == dst->type && a.IsContiguous() && dst->IsContiguous()) {
    ParallelMemcpy(p, dst->data, a.data, RowBytes(a.type, a.ne[0]) * a.NumRows());
    return;
  }
  if (a.NumElements() == 0) return;
  const bool quantized = IsQuantized(a.type) || IsQuantized(dst->type);
  const int64_t unit = quantized ? a.ne[0] : 1;
  int64_t begin, end;
  SplitRange(a.NumElements() / unit, p.ith, p.nth, &begin, &end);
  begin *= unit;
  end *= unit;
  Cursor src(a, begin), out(*dst, begin);
  for (int64_t k = begin; k < end;) {
    const int64_t run = std::min({src.LeftInRow(), out.LeftInRow(), end - k});
    ConvertRow(a.type, src.Address(), a.nb[0], dst->type, out.Address(), dst->nb[0], run);
    src.Advance(run);
    out.Advance(run);
    k += run;
  }
}

}  // namespace tg::cpu
