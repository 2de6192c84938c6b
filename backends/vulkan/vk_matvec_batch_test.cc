// Batch invariance of the matrix-vector kernel (mul_mat_vec.comp) that GPUs take for decode
// steps of up to 16 sequences: a sequence's (column's) results are bit-identical whether it is
// multiplied alone or with up to 15 others, in a plain product and in the fused q/k/v and
// gate/up/SWIGLU modes, for float and quantized weights. Runs on lavapipe with the GPU kernels
// forced (TG_VULKAN_CPU=1, TG_VULKAN_KERNELS=gpu); skips where there is no Vulkan device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "backends/register_builtin.h"
#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_family.h"
#include "backends/vulkan/vk_stream.h"
#include "core/context.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "core/quant_blocks.h"
#include "tests/lib/test_util.h"

namespace tg::vulkan {
namespace {

constexpr char kNoDevice[] = "no Vulkan device (install mesa-vulkan-drivers for lavapipe)";
// The most columns the matrix-vector kernel takes in one workgroup.
constexpr int64_t kMaxColumns = 16;
// Rows of 62: the matrices' seams (mode 1) fall inside workgroups of rows.
constexpr int64_t kRows = 62;

// Fresh devices with the GPU kernels forced, lavapipe included.
std::vector<std::unique_ptr<VulkanDevice>> GpuStyleDevices() {
  setenv("TG_VULKAN_CPU", "1", 0);
  setenv("TG_VULKAN_KERNELS", "gpu", 1);
  absl::StatusOr<std::vector<std::unique_ptr<VulkanDevice>>> d = DiscoverDevices();
  unsetenv("TG_VULKAN_KERNELS");
  if (!d.ok()) return {};
  return std::move(*d);
}

// Builds the graph's outputs from its inputs (weights first, the activations x last).
using MakeOutputs = std::function<std::vector<Tensor*>(Context&, std::vector<Tensor*>*)>;

struct Result {
  std::vector<std::vector<float>> outputs;  // each [M, n] in logical order.
  int dispatches = 0;
};

// Computes `make` on `device` with n activation columns: the first n of the same kMaxColumns,
// and the same weights, whatever n is.
Result Compute(Device* device, const MakeOutputs& make, int64_t n) {
  Context ctx;
  std::vector<Tensor*> inputs;
  std::vector<Tensor*> outs = make(ctx, &inputs);
  for (Tensor* t : outs) t->flags |= kFlagOutput;
  absl::StatusOr<Graph> graph = BuildGraph(outs);
  auto stream = device->CreateStream();
  if (!graph.ok() || !stream.ok()) return {};
  std::vector<std::pair<Tensor*, std::vector<float>>> data;
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i]->flags |= kFlagInput;
    const bool activations = i + 1 == inputs.size();
    std::vector<float> values = testing::RandomFloats(
        static_cast<size_t>(inputs[i]->ne[0] * (activations ? kMaxColumns : inputs[i]->ne[1])),
        static_cast<uint32_t>(7 + i));
    values.resize(static_cast<size_t>(inputs[i]->NumElements()));
    data.emplace_back(inputs[i], std::move(values));
  }
  testing::GraphRun run;
  if (!testing::AllocateAndCompute(device, stream->get(), *graph, data, &run).ok() ||
      !(*stream)->Synchronize().ok()) {
    return {};
  }
  Result result;
  result.dispatches = static_cast<VulkanStream*>(stream->get())->last_dispatches();
  for (Tensor* t : outs) result.outputs.push_back(testing::ReadF32(*t));
  return result;
}

// Every column of every output computed with n columns equals, bit for bit, the same column
// computed with kMaxColumns; kMaxColumns take at most `max_dispatches` dispatches, and fewer
// columns as many.
void ExpectBatchInvariant(Device* device, const std::function<MakeOutputs(int64_t)>& make,
                          const char* what, int max_dispatches) {
  const Result all = Compute(device, make(kMaxColumns), kMaxColumns);
  ASSERT_FALSE(all.outputs.empty()) << what;
  EXPECT_LE(all.dispatches, max_dispatches) << what;
  for (int64_t n : {1, 2, 3, 4, 8, 9}) {
    const Result some = Compute(device, make(n), n);
    ASSERT_EQ(some.outputs.size(), all.outputs.size()) << what << " n=" << n;
    EXPECT_EQ(some.dispatches, all.dispatches) << what << " n=" << n;
    for (size_t o = 0; o < all.outputs.size(); ++o) {
      const size_t per_column = all.outputs[o].size() / kMaxColumns;
      ASSERT_EQ(some.outputs[o].size(), per_column * n) << what << " n=" << n;
      EXPECT_EQ(std::memcmp(some.outputs[o].data(), all.outputs[o].data(),
                            some.outputs[o].size() * sizeof(float)),
                0)
          << what << ": output " << o << " with " << n << " columns differs from its first " << n
          << " columns with " << kMaxColumns;
    }
  }
}

class MatVecBatchTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    devices_ = GpuStyleDevices();
    if (devices_.empty()) GTEST_SKIP() << kNoDevice;
    device_ = devices_[0].get();
    k_ = IsQuantized(GetParam()) ? 2 * kQK_K : 257;  // 257: a short last unit.
  }
  std::vector<std::unique_ptr<VulkanDevice>> devices_;
  VulkanDevice* device_ = nullptr;
  int64_t k_ = 0;
};

TEST_P(MatVecBatchTest, PlainProductIsBatchInvariant) {
  const DType type = GetParam();
  const int64_t k = k_;
  ExpectBatchInvariant(
      device_,
      [=](int64_t n) -> MakeOutputs {
        return [=](Context& ctx, std::vector<Tensor*>* in) {
          Tensor* w = *ctx.NewTensor(type, {k, kRows});
          Tensor* x = *ctx.NewTensor(DType::kF32, {k, n});
          *in = {w, x};
          return std::vector<Tensor*>{*MulMat(ctx, w, x)};
        };
      },
      "plain", 2);  // the activations' quantization, the product.
}

// q/k/v of one input (mode 1) and gate/up/SWIGLU of another (mode 2).
TEST_P(MatVecBatchTest, FusedProductsAreBatchInvariant) {
  const DType type = GetParam();
  const int64_t k = k_;
  ExpectBatchInvariant(
      device_,
      [=](int64_t n) -> MakeOutputs {
        return [=](Context& ctx, std::vector<Tensor*>* in) {
          std::vector<Tensor*> w;
          for (int i = 0; i < 5; ++i) w.push_back(*ctx.NewTensor(type, {k, kRows}));
          Tensor* x = *ctx.NewTensor(DType::kF32, {k, n});
          *in = w;
          in->push_back(x);
          Tensor* q = *MulMat(ctx, w[0], x);
          Tensor* kk = *MulMat(ctx, w[1], x);
          Tensor* v = *MulMat(ctx, w[2], x);
          Tensor* gate = *MulMat(ctx, w[3], x);
          Tensor* up = *MulMat(ctx, w[4], x);
          return std::vector<Tensor*>{q, kk, v, gate, up, *Swiglu(ctx, gate, up)};
        };
      },
      // The activations' quantization, q/k/v, gate/up/SWIGLU: the groups fuse at 16 columns.
      "fused", 3);
}

INSTANTIATE_TEST_SUITE_P(Types, MatVecBatchTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_K, DType::kQ2_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace tg::vulkan
