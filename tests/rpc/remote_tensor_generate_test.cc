// Generation under a tensor split over rpc-servers (two started in this process on loopback,
// two devices each; the all-reduces run between the servers): the meta device offers events,
// so LlamaSession::GenerateGreedy and Generate queue steps ahead of their picks, each step's
// token copied on the devices from the step before. Their tokens must be those of the local
// CPU decoding one step at a time (DecodeGreedy, DecodeSample), across several KV blocks, for
// batches of one step and of as many as the session sizes; a generation stopped early and
// continued gives the same tokens.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_testing.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "meta/meta_device.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "models/shared_model_path.h"

namespace tg {
namespace {

class RemoteTensorGenerateTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    path_ = DemoModelPath();
    if (!std::ifstream(path_).good()) GTEST_SKIP() << path_ << " not found";
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    Device* cpu = Registry::Get().CpuDevice();
    servers_.Start({cpu, cpu});
    servers_.Start({cpu, cpu});
    ASSERT_EQ(servers_.devices().size(), 4u);
    LoadOptions local;
    local.device = cpu;
    auto reference = LlamaModel::Load(path_, local);
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = std::move(*reference);
    LoadOptions remote;
    remote.plan = DevicePlan{SplitMode::kTensor, servers_.devices(), {0.25f, 0.25f, 0.25f, 0.25f}};
    auto model = LlamaModel::Load(path_, remote);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }

  void TearDown() override {
    model_.reset();
    reference_.reset();
    servers_.Stop();
  }

  SessionOptions Options() const {
    SessionOptions so;
    so.n_ctx = 128;
    so.kv_pad = 16;  // a new graph every 16 positions: the queue drains there.
    so.kv_type = DType::kF32;
    so.greedy_batch = GetParam();
    return so;
  }

  static SamplingParams Sampling() {
    SamplingParams p;
    p.sample.temperature = 0.8f;
    p.sample.seed = 7;
    p.sample.repeat_penalty = 1.2f;
    p.penalty_last_n = 16;
    return p;
  }

  // The prompt, then `n` tokens one step at a time on the local CPU: greedy, or sampled.
  std::vector<int32_t> Reference(int64_t n, bool sampled) {
    auto session = *LlamaSession::Create(*reference_, Options());
    const SamplingParams p = Sampling();
    std::vector<int32_t> out = {sampled ? *session->DecodeSample(prompt_, p)
                                        : *session->DecodeGreedy(prompt_)};
    for (int64_t i = 0; i < n; ++i) {
      out.push_back(sampled ? *session->DecodeSample({&out.back(), 1}, p)
                            : *session->DecodeGreedy({&out.back(), 1}));
    }
    return out;
  }

  // Generates up to max_tokens from got.back() on the tensor split, appending every pick to
  // `got`, until it holds `stop_at` tokens.
  static absl::Status Generate(LlamaSession& session, bool sampled, int64_t max_tokens,
                               std::vector<int32_t>& got, size_t stop_at = SIZE_MAX) {
    auto append = [&](int32_t t) {
      got.push_back(t);
      return got.size() < stop_at;
    };
    if (sampled) return session.Generate(got.back(), max_tokens, Sampling(), append);
    return session.GenerateGreedy(got.back(), max_tokens, append);
  }

  std::string path_;
  rpc::testing::LoopbackServers servers_;
  std::unique_ptr<LlamaModel> reference_, model_;
  const std::vector<int32_t> prompt_ = {1, 403, 407, 261, 378};
};

TEST_P(RemoteTensorGenerateTest, StepsQueuedAheadGiveTheTokensOfOneStepAtATime) {
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    const std::vector<int32_t> want = Reference(60, sampled);
    auto session = *LlamaSession::Create(*model_, Options());
    // The session's stream has found the all-reduce run by the servers: events exist.
    EXPECT_TRUE(model_->device()->CreateEvent().ok());
    const SamplingParams p = Sampling();
    std::vector<int32_t> got = {sampled ? *session->DecodeSample(prompt_, p)
                                        : *session->DecodeGreedy(prompt_)};
    ASSERT_TRUE(Generate(*session, sampled, 60, got).ok());
    EXPECT_EQ(got, want);
    EXPECT_EQ(session->n_past(), static_cast<int64_t>(prompt_.size()) + 60);
  }
}

TEST_P(RemoteTensorGenerateTest, StoppingEarlyLeavesNothingOfTheStepsQueuedAhead) {
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    const std::vector<int32_t> want = Reference(40, sampled);
    auto session = *LlamaSession::Create(*model_, Options());
    const SamplingParams p = Sampling();
    std::vector<int32_t> got = {sampled ? *session->DecodeSample(prompt_, p)
                                        : *session->DecodeGreedy(prompt_)};
    // Stop at the 10th pick: the steps after it are on the servers already.
    ASSERT_TRUE(Generate(*session, sampled, 40, got, /*stop_at=*/10).ok());
    ASSERT_EQ(got.size(), 10u);
    EXPECT_EQ(session->n_past(), static_cast<int64_t>(prompt_.size()) + 9);
    ASSERT_TRUE(Generate(*session, sampled, 31, got).ok());
    EXPECT_EQ(got, want);
  }
}

INSTANTIATE_TEST_SUITE_P(GreedyBatch, RemoteTensorGenerateTest, ::testing::Values(1, 0),
                         [](const auto& info) { return absl::StrCat("batch", info.param); });

// A tensor split over local devices runs each Compute to its end: no events, so generation
// goes one step at a time there.
TEST(MetaDeviceEventsTest, LocalDevicesOfferNone) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  Device* cpu = Registry::Get().CpuDevice();
  auto meta = meta::MetaDevice::Create({cpu}, nullptr);
  ASSERT_TRUE(meta.ok()) << meta.status();
  ASSERT_TRUE((*meta)->CreateStream().ok());
  EXPECT_TRUE(absl::IsUnimplemented((*meta)->CreateEvent().status()));
}

}  // namespace
}  // namespace tg
