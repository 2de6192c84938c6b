// Element and row access of the reference: reads any DType as double, writes through float.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quants.h"
#include "reference/reference_internal.h"
#include "reference/reference_ops.h"

namespace tg::ref {
namespace {

// Address of the element (block size 1) or block (quantized) holding element i0 of a row.
const uint8_t* BlockPtr(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t block = i0 / BlockSize(t.type);
  return static_cast<const uint8_t*>(t.data) + block * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] +
         i3 * t.nb[3];
}

// Reads one value of a type with block size 1. memcpy because views may be misaligned.
double ReadScalar(DType type, const uint8_t* p) {
  switch (type) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, sizeof(f));
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof(h));
      return HalfToFloat(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof(h));
      return BF16ToFloat(h);
    }
    case DType::kI32: {
      int32_t i;
      std::memcpy(&i, p, sizeof(i));
      return i;
    }
    default:
      return std::numeric_limits<double>::quiet_NaN();  // quantized: callers dequantize blocks.
  }
}

// Writes one value of a type with block size 1, rounding through float like every backend.
void WriteScalar(DType type, double v, uint8_t* p) {
  const float f = static_cast<float>(v);
  switch (type) {
    case DType::kF32:
      std::memcpy(p, &f, sizeof(f));
      return;
    case DType::kF16: {
      const uint16_t h = FloatToHalf(f);
      std::memcpy(p, &h, sizeof(h));
      return;
    }
    case DType::kBF16: {
      const uint16_t h = FloatToBF16(f);
      std::memcpy(p, &h, sizeof(h));
      return;
    }
    default:
      QuantizeRow(type, &f, p, 1);  // I32: the project's float -> int rounding rule.
      return;
  }
}

}  // namespace

double ReadElement(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const uint8_t* p = BlockPtr(t, i0, i1, i2, i3);
  if (!IsQuantized(t.type)) return ReadScalar(t.type, p);
  float block[kQK_K];  // the largest block of any type.
  DequantizeRow(t.type, p, block, BlockSize(t.type));
  return block[i0 % BlockSize(t.type)];
}

void ReadRow(const Tensor& t, int64_t i1, int64_t i2, int64_t i3, double* out) {
  const uint8_t* row = BlockPtr(t, 0, i1, i2, i3);
  if (!IsQuantized(t.type)) {
    for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) out[i0] = ReadScalar(t.type, row + i0 * t.nb[0]);
    return;
  }
  const int64_t block_size = BlockSize(t.type);
  float block[kQK_K];
  for (int64_t b = 0; b < t.ne[0] / block_size; ++b) {
    DequantizeRow(t.type, row + b * t.nb[0], block, block_size);
    for (int64_t j = 0; j < block_size; ++j) out[b * block_size + j] = block[j];
  }
}

void WriteRow(Tensor* t, int64_t i1, int64_t i2, int64_t i3, const double* row) {
  uint8_t* dst = const_cast<uint8_t*>(BlockPtr(*t, 0, i1, i2, i3));
  if (!IsQuantized(t->type)) {
    for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) WriteScalar(t->type, row[i0], dst + i0 * t->nb[0]);
    return;
  }
  // Block by block, so rows whose blocks are strided (nb[0] != block bytes) work too; the
  // reference quantizers treat blocks independently, so this equals quantizing the row.
  const int64_t block_size = BlockSize(t->type);
  float block[kQK_K];
  for (int64_t b = 0; b < t->ne[0] / block_size; ++b) {
    for (int64_t j = 0; j < block_size; ++j) block[j] = static_cast<float>(row[b * block_size + j]);
    QuantizeRow(t->type, block, dst + b * t->nb[0], block_size);
  }
}

double Nmse(const Tensor& actual, const Tensor& expected) {
  if (!SameShape(actual, expected)) return std::numeric_limits<double>::infinity();
  double err = 0, norm = 0;
  std::vector<double> a(actual.ne[0]), e(expected.ne[0]);
  internal::ForEachRow(expected, [&](int64_t i1, int64_t i2, int64_t i3) {
    ReadRow(actual, i1, i2, i3, a.data());
    ReadRow(expected, i1, i2, i3, e.data());
    for (size_t i = 0; i < e.size(); ++i) {
      if (a[i] != e[i]) err += (a[i] - e[i]) * (a[i] - e[i]);  // skips matching infinities.
      if (std::isnan(a[i]) || std::isnan(e[i])) err = std::numeric_limits<double>::quiet_NaN();
      if (!std::isinf(e[i])) norm += e[i] * e[i];
    }
  });
  if (std::isnan(err)) return err;
  if (err == 0) return 0;
  if (norm == 0) return std::numeric_limits<double>::infinity();
  return err / norm;
}

namespace internal {

std::vector<double> ReadRowVector(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  std::vector<double> row(t.ne[0]);
  ReadRow(t, i1, i2, i3, row.data());
  return row;
}

std::vector<double> ReadMatrix(const Tensor& t, int64_t i2, int64_t i3) {
  std::vector<double> m(t.ne[0] * t.ne[1]);
  for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) ReadRow(t, i1, i2, i3, m.data() + i1 * t.ne[0]);
  return m;
}

void WriteElement(Tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double v) {
  WriteScalar(t->type, v, const_cast<uint8_t*>(BlockPtr(*t, i0, i1, i2, i3)));
}

int32_t ReadIndex(const Tensor& t, int64_t i0, int64_t i1, int64_t i2) {
  int32_t v;
  std::memcpy(&v, BlockPtr(t, i0, i1, i2, 0), sizeof(v));
  return v;
}

void SoftmaxInPlace(std::vector<double>* x) {
  double max = -std::numeric_limits<double>::infinity();
  for (double v : *x) max = std::max(max, v);
  if (max == -std::numeric_limits<double>::infinity()) {
    std::fill(x->begin(), x->end(), 0.0);  // fully masked: zeros, not 0/0.
    return;
  }
  double sum = 0;
  for (double& v : *x) {
    v = std::exp(v - max);  // exp(-inf) = 0 gives masked entries probability 0.
    sum += v;
  }
  for (double& v : *x) v /= sum;
}

absl::Status CheckSources(const Tensor& dst, const char* op_name, int num_required) {
  for (int i = 0; i < num_required; ++i) {
    if (dst.src[i] == nullptr || dst.src[i]->data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: source %d is missing or has no data", op_name, i));
    }
  }
  if (dst.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: dst has no data", op_name));
  }
  return absl::OkStatus();
}

absl::Status CheckIndexType(const Tensor& idx, const char* op_name) {
  if (idx.type == DType::kI32) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrFormat("%s: index tensor of type %s (only i32)", op_name, DTypeName(idx.type)));
}

}  // namespace internal
}  // namespace tg::ref
