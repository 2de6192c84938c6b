// Helpers shared by the unit tests: deterministic random data, running a graph on a device.
#ifndef TENSORGRID_TESTS_LIB_TEST_UTIL_H_
#define TENSORGRID_TESTS_LIB_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/graph.h"
#include "core/graph_allocator.h"

namespace tg::testing {

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// sum((got - want)^2) / sum(want^2); the plain squared error when want is all zeros.
double Nmse(const std::vector<float>& got, const std::vector<double>& want);

// The default CPU device (registering the builtin backends first).
Device* CpuDevice();

// Places the graph on `device` (its default buffer type), writes each leaf's f32 data from
// `leaf_data` (converted to the leaf's type; leafs missing from the map are left as is),
// and computes it with `stream`.
struct GraphRun {
  std::unique_ptr<GraphAllocator> allocator;
};
absl::Status AllocateAndCompute(
    Device* device, Stream* stream, Graph& graph,
    const std::vector<std::pair<Tensor*, std::vector<float>>>& leaf_data, GraphRun* run);

// Reads a placed tensor as f32 values in logical order (dim 0 fastest).
std::vector<float> ReadF32(const Tensor& t);

}  // namespace tg::testing

#endif  // TENSORGRID_TESTS_LIB_TEST_UTIL_H_
