// Many sequences at once (models/batch_session.h) on CUDA0 alone: 1, 2, 4 and 8 sequences of
// stories260K decoded together (the matrix-vector kernel with several columns, the
// per-sequence attention mask) give each the greedy tokens and logits (F32 KV, within 1e-4)
// it gets alone on CUDA0, and no graph needs the CPU. Skips where no CUDA device is present;
// scripts/gpu-check.sh runs it from the bundle with the model beside it (argument 1).
#include <filesystem>
#include <string>

#include "backends/register_builtin.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "models/llama_model.h"
#include "models/shared_model_path.h"
#include "tests/lib/batched_vs_alone.h"

namespace tg {
namespace {

std::string g_model;  // argv[1] when given, else the repository's demo model.

TEST(CudaBatchSessionGpuTest, BatchedEqualsAlone) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> gpu = Registry::Get().FindDevice("CUDA0");
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA device";
  const std::string path = g_model.empty() ? DemoModelPath() : g_model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  LoadOptions on_gpu;
  on_gpu.device = *gpu;
  auto model = LlamaModel::Load(path, on_gpu);
  ASSERT_TRUE(model.ok()) << model.status();
  testing::ExpectBatchedEqualsAloneOnItsDevice(**model, /*steps=*/24, /*tol=*/1e-4);
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1) tg::g_model = argv[1];
  return RUN_ALL_TESTS();
}
