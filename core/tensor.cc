#include "core/tensor.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace tg {

size_t Tensor::NumBytes() const {
  for (int i = 0; i < kMaxDims; ++i) {
    if (ne[i] <= 0) return 0;
  }
  size_t bytes;
  if (BlockSize(type) == 1) {
    bytes = BlockBytes(type);
    for (int i = 0; i < kMaxDims; ++i) bytes += (ne[i] - 1) * nb[i];
  } else {
    bytes = ne[0] * nb[0] / BlockSize(type);
    for (int i = 1; i < kMaxDims; ++i) bytes += (ne[i] - 1) * nb[i];
  }
  return bytes;
}

bool Tensor::IsContiguous() const {
  size_t next = BlockBytes(type);
  if (nb[0] != next) return false;
  next = tg::RowBytes(type, ne[0]);
  for (int i = 1; i < kMaxDims; ++i) {
    if (ne[i] != 1 && nb[i] != next) return false;
    next *= ne[i];
  }
  return true;
}

void Tensor::SetName(absl::string_view n) {
  const size_t len = std::min(n.size(), static_cast<size_t>(kMaxName - 1));
  std::memcpy(name, n.data(), len);
  name[len] = '\0';
}

void SetContiguousStrides(Tensor* t) {
  t->nb[0] = BlockBytes(t->type);
  t->nb[1] = tg::RowBytes(t->type, t->ne[0]);
  for (int i = 2; i < kMaxDims; ++i) t->nb[i] = t->nb[i - 1] * t->ne[i - 1];
}

bool SameShape(const Tensor& a, const Tensor& b) {
  return std::equal(a.ne, a.ne + kMaxDims, b.ne);
}

std::string DescribeTensor(const Tensor& t) {
  return absl::StrFormat("'%s'[%s %dx%dx%dx%d]", t.name, DTypeName(t.type), t.ne[0], t.ne[1],
                         t.ne[2], t.ne[3]);
}

}  // namespace tg
