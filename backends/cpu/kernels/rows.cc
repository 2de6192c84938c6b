// GET_ROWS and SET_ROWS: gather / scatter rows picked by I32 indices, converting types.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/row_convert.h"

namespace tg::cpu {
namespace {

int32_t ReadIndex(const Tensor& idx, int64_t i0, int64_t i1, int64_t i2) {
  int32_t v;
  const auto* p =
      static_cast<const uint8_t*>(idx.data) + i0 * idx.nb[0] + i1 * idx.nb[1] + i2 * idx.nb[2];
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void ReportBadIndex(const ComputeParams& p, const char* op, int32_t index, int64_t n) {
  char msg[128];
  std::snprintf(msg, sizeof(msg), "%s: row index %" PRId32 " out of range [0, %" PRId64 ")", op,
                index, n);
  p.Fail(msg);
}

}  // namespace

// dst[:, i, j2, j3] = f32(a[:, idx[i, j2, j3], j2, j3]); dst rows are split over threads.
void ComputeGetRows(const ComputeParams& p, Tensor* dst) {
  const Tensor& a = *dst->src[0];
  const Tensor& idx = *dst->src[1];
  const int64_t n0 = a.ne[0];
  const int64_t nr = dst->ne[1];
  const int64_t n2 = dst->ne[2];
  int64_t begin, end;
  SplitRange(dst->NumRows(), p.ith, p.nth, &begin, &end);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t i = r % nr;
    const int64_t j2 = (r / nr) % n2;
    const int64_t j3 = r / (nr * n2);
    auto* out = reinterpret_cast<float*>(static_cast<uint8_t*>(dst->data) + i * dst->nb[1] +
                                         j2 * dst->nb[2] + j3 * dst->nb[3]);
    const int32_t row = ReadIndex(idx, i, j2, j3);
    if (row < 0 || row >= a.ne[1]) {
      ReportBadIndex(p, "GET_ROWS", row, a.ne[1]);
      std::memset(out, 0, n0 * sizeof(float));
      continue;
    }
    const auto* in =
        static_cast<const uint8_t*>(a.data) + row * a.nb[1] + j2 * a.nb[2] + j3 * a.nb[3];
    ConvertRow(a.type, in, a.nb[0], dst->type, out, dst->nb[0], n0);
  }
}

// a[:, idx[i, j2 % c1, j3 % c2], j2, j3] = convert(b[:, i, j2, j3]); dst aliases a. b's rows
// are split over threads.
void ComputeSetRows(const ComputeParams& p, Tensor* dst) {
  const Tensor& b = *dst->src[1];
  const Tensor& idx = *dst->src[2];
  const int64_t n0 = b.ne[0];
  const int64_t nr = b.ne[1];
  const int64_t n2 = b.ne[2];
  int64_t begin, end;
  SplitRange(b.NumRows(), p.ith, p.nth, &begin, &end);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t i = r % nr;
    const int64_t j2 = (r / nr) % n2;
    const int64_t j3 = r / (nr * n2);
    const int32_t row = ReadIndex(idx, i, j2 % idx.ne[1], j3 % idx.ne[2]);
    if (row < 0 || row >= dst->ne[1]) {
      ReportBadIndex(p, "SET_ROWS", row, dst->ne[1]);
      continue;
    }
    const auto* in =
        static_cast<const uint8_t*>(b.data) + i * b.nb[1] + j2 * b.nb[2] + j3 * b.nb[3];
    auto* out =
        static_cast<uint8_t*>(dst->data) + row * dst->nb[1] + j2 * dst->nb[2] + j3 * dst->nb[3];
    ConvertRow(b.type, in, b.nb[0], dst->type, out, dst->nb[0], n0);
  }
}

}  // namespace tg::cpu
