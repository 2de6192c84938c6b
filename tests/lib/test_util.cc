#include "tests/lib/test_util.h"

#include <random>

#include "backends/register_builtin.h"
#include "core/quants.h"
#include "core/registry.h"

namespace tg::testing {

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double Nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return ref > 0 ? err / ref : err;
}

Device* CpuDevice() {
  if (!RegisterBuiltinBackends().ok()) return nullptr;
  return Registry::Get().CpuDevice();
}

absl::Status AllocateAndCompute(
    Device* device, Stream* stream, Graph& graph,
    const std::vector<std::pair<Tensor*, std::vector<float>>>& leaf_data, GraphRun* run) {
  if (run->allocator == nullptr) {
    run->allocator = std::make_unique<GraphAllocator>(device->default_buffer_type());
  }
  if (absl::Status s = run->allocator->Allocate(graph); !s.ok()) return s;
  for (const auto& [t, values] : leaf_data) {
    if (static_cast<int64_t>(values.size()) != t->NumElements() || !t->IsContiguous()) {
      return absl::InvalidArgumentError("leaf data does not match its tensor");
    }
    std::vector<uint8_t> bytes(t->NumBytes());
    QuantizeRow(t->type, values.data(), bytes.data(), t->NumElements());
    if (absl::Status s = t->buffer->SetTensor(t, bytes.data(), 0, bytes.size()); !s.ok()) return s;
  }
  return stream->Compute(graph);
}

std::vector<float> ReadF32(const Tensor& t) {
  std::vector<float> out;
  out.reserve(t.NumElements());
  std::vector<float> row(t.ne[0]);
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) {
        const auto* base =
            static_cast<const uint8_t*>(t.data) + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
        if (t.RowsContiguous()) {
          DequantizeRow(t.type, base, row.data(), t.ne[0]);
        } else {
          for (int64_t i0 = 0; i0 < t.ne[0]; ++i0)
            DequantizeRow(t.type, base + i0 * t.nb[0], &row[i0], 1);
        }
        out.insert(out.end(), row.begin(), row.end());
      }
    }
  }
  return out;
}

}  // namespace tg::testing
