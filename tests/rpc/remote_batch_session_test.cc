// BatchSession (models/batch_session.h) on remote devices: two rpc-servers started in this
// process on loopback, two devices each, the model split over their four devices by layers
// and by tensors (the all-reduces run between the servers). Four sequences decoded together
// give each the greedy tokens and logits (F32 KV, within 1e-4) it gets alone on the local CPU.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_testing.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "models/batch_session.h"
#include "models/llama_model.h"
#include "models/shared_model_path.h"
#include "tests/lib/batched_vs_alone.h"

namespace tg {
namespace {

constexpr int kSequences = 4;
constexpr int kSteps = 16;

class RemoteBatchSessionTest : public ::testing::TestWithParam<SplitMode> {
 protected:
  void SetUp() override {
    path_ = DemoModelPath();
    if (!std::ifstream(path_).good()) GTEST_SKIP() << path_ << " not found";
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    Device* cpu = Registry::Get().CpuDevice();
    servers_.Start({cpu, cpu});
    servers_.Start({cpu, cpu});
    ASSERT_EQ(servers_.devices().size(), 4u);
  }

  std::string path_;
  rpc::testing::LoopbackServers servers_;
};

TEST_P(RemoteBatchSessionTest, BatchedEqualsAloneOnTheLocalCpu) {
  LoadOptions local;
  local.device = Registry::Get().CpuDevice();
  auto reference = LlamaModel::Load(path_, local);
  ASSERT_TRUE(reference.ok()) << reference.status();
  LoadOptions remote;
  remote.plan = DevicePlan{GetParam(), servers_.devices(), {0.25f, 0.25f, 0.25f, 0.25f}};
  auto model = LlamaModel::Load(path_, remote);
  ASSERT_TRUE(model.ok()) << model.status();
  BatchSessionOptions o;
  o.n_ctx = 256;
  o.kv_type = DType::kF32;
  o.min_micro_batch = 1;  // the prompt steps pipelined over the servers.
  auto session = BatchSession::Create(**model, o);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kSequences; ++i) prompts.push_back(testing::VariedPrompt(i));
  const std::vector<testing::GreedyTrace> batched =
      testing::DecodeBatched(**session, prompts, kSteps);
  ASSERT_EQ(batched.size(), static_cast<size_t>(kSequences));
  for (int i = 0; i < kSequences; ++i) {
    testing::ExpectSameTrace(testing::DecodeAlone(**reference, prompts[i], kSteps), batched[i],
                             1e-4, absl::StrCat(SplitModeName(GetParam()), ", sequence ", i));
  }
  session->reset();
  model->reset();
}

INSTANTIATE_TEST_SUITE_P(Splits, RemoteBatchSessionTest,
                         ::testing::Values(SplitMode::kLayer, SplitMode::kTensor),
                         [](const auto& info) { return std::string(SplitModeName(info.param)); });

}  // namespace
}  // namespace tg
