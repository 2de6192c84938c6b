// LlamaSession's sampling on the device (DecodeSample, Generate) on a real model
// (stories260K), against draws made on the host: the f64 reference SAMPLE (reference/) run on
// the logits of a session that only decodes, at each token's position, with the penalty
// window of the tokens decoded so far. On a device with events (steps queued ahead in
// Stream batches, their picks and penalty window fed back on the device, across KV blocks),
// on one without (one step at a time) and split by layers over two devices; after steps
// queued ahead were discarded, generation resumes from the caller's token.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "core/ops.h"
#include "models/executor_testing.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "models/shared_model_path.h"
#include "reference/reference_ops.h"

namespace tg {
namespace {

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};

// The reference SAMPLE's pick from the logits of the last token of `history` (at position
// history.size() - 1), with the penalty over its last penalty_last_n tokens.
int32_t HostDraw(absl::Span<const float> logits, const std::vector<int32_t>& history,
                 const SamplingParams& p) {
  Context ctx;
  std::vector<float> l(logits.begin(), logits.end());
  int32_t position = static_cast<int32_t>(history.size()) - 1;
  Tensor* lt = *ctx.NewTensor(DType::kF32, {static_cast<int64_t>(l.size()), 1});
  Tensor* pos = *ctx.NewTensor(DType::kI32, {1});
  lt->data = l.data();
  pos->data = &position;
  std::vector<int32_t> window;
  Tensor* recent = nullptr;
  if (p.penalty_last_n > 0) {
    for (int64_t i = 0; i < p.penalty_last_n; ++i) {
      const int64_t at = static_cast<int64_t>(history.size()) - 1 - i;
      window.push_back(at >= 0 ? history[at] : -1);
    }
    recent = *ctx.NewTensor(DType::kI32, {p.penalty_last_n});
    recent->data = window.data();
  }
  absl::StatusOr<Tensor*> node = Sample(ctx, lt, pos, recent, p.sample);
  EXPECT_TRUE(node.ok()) << node.status();
  int32_t out = -1;
  (*node)->data = &out;
  EXPECT_TRUE(ref::Compute(*node).ok());
  return out;
}

class SessionSampleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = DemoModelPath();
    if (!std::ifstream(path_).good()) GTEST_SKIP() << path_ << " not found";
    so_.n_ctx = 64;
    so_.kv_pad = 16;
    so_.kv_type = DType::kF32;
  }

  std::unique_ptr<LlamaModel> Load(Device* device) {
    LoadOptions lo;
    lo.device = device;
    return *LlamaModel::Load(path_, lo);
  }

  // The prompt's draw and n more, each from the host's draw on the logits of the one before.
  std::vector<int32_t> HostGeneration(const SamplingParams& p, int n,
                                      std::vector<int32_t> forced = {}) {
    auto model = Load(&dev0_);
    auto s = *LlamaSession::Create(*model, so_);
    std::vector<int32_t> history = kPrompt;
    absl::StatusOr<absl::Span<const float>> logits = s->Decode(kPrompt);
    std::vector<int32_t> out;
    for (int i = 0; i <= n; ++i) {
      EXPECT_TRUE(logits.ok()) << logits.status();
      int32_t pick = HostDraw(*logits, history, p);
      if (i < static_cast<int>(forced.size()) && forced[i] >= 0) pick = forced[i];
      out.push_back(pick);
      history.push_back(pick);
      logits = s->Decode({&pick, 1});
    }
    return out;
  }

  std::string path_;
  SessionOptions so_;
  cpu::CpuDevice dev0_{"CPU0", "cpu:0", 1};
  cpu::CpuDevice dev1_{"CPU1", "cpu:1", 1};
};

// DecodeSample on the prompt, then Generate of n more: every pick.
std::vector<int32_t> DeviceGeneration(LlamaSession& s, const SamplingParams& p, int n) {
  std::vector<int32_t> got = {*s.DecodeSample(kPrompt, p)};
  EXPECT_TRUE(s.Generate(got.back(), n, p, testing::AppendTo(got)).ok());
  return got;
}

SamplingParams Defaults(uint64_t seed) { return {.sample = {.seed = seed}}; }
SamplingParams Penalized(uint64_t seed) {
  return {.sample = {.temperature = 1.0f,
                     .top_k = 0,
                     .top_p = 0.9f,
                     .min_p = 0.02f,
                     .repeat_penalty = 1.3f,
                     .seed = seed},
          .penalty_last_n = 16};
}

// DecodeSample on the prompt, then Generate: the host's draws, whether steps are queued
// ahead (in batches of 1, 3 or sized by the session) or go one at a time.
TEST_F(SessionSampleTest, GenerateDrawsWhatTheHostDraws) {
  testing::EventCpuDevice events("EV");
  auto queued = Load(&events);
  auto plain = Load(&dev0_);
  for (const SamplingParams& p : {Defaults(7), Penalized(123)}) {
    SCOPED_TRACE(absl::StrCat("penalty window ", p.penalty_last_n));
    const std::vector<int32_t> want = HostGeneration(p, 40);
    for (int greedy_batch : {1, 3, 0}) {
      SCOPED_TRACE(absl::StrCat("greedy_batch ", greedy_batch));
      so_.greedy_batch = greedy_batch;
      for (LlamaModel* model : {queued.get(), plain.get()}) {
        events.batch_computes.clear();
        auto s = *LlamaSession::Create(*model, so_);
        EXPECT_EQ(DeviceGeneration(*s, p, 40), want);
        EXPECT_EQ(s->n_past(), static_cast<int64_t>(kPrompt.size()) + 40);
        // The prompt's graph, then one per KV block the steps touch: n_kv 16, 32, 48.
        EXPECT_EQ(s->graphs_built(), 4);
        if (model == queued.get()) {
          EXPECT_FALSE(events.batch_computes.empty());
        }
      }
    }
  }
}

// A prompt's draw is at its last token's position, whatever the batch: prompts of 1 to 12
// tokens, in one batch or in batches of 3, at a hot temperature (so that the counter decides).
TEST_F(SessionSampleTest, PromptDrawIsAtItsLastTokensPosition) {
  auto model = Load(&dev0_);
  const SamplingParams hot = {.sample = {.temperature = 3.0f,
                                         .top_k = 0,
                                         .top_p = 1.0f,
                                         .min_p = 0.0f,
                                         .repeat_penalty = 1.5f,
                                         .seed = 42},
                              .penalty_last_n = 4};
  auto host = *LlamaSession::Create(*model, so_);
  for (int64_t n_batch : {512, 3}) {
    so_.n_batch = n_batch;
    auto s = *LlamaSession::Create(*model, so_);
    for (int len = 1; len <= 12; ++len) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < len; ++i) prompt.push_back((i * 97 + len * 13) % 512);
      host->Reset();
      s->Reset();
      absl::StatusOr<absl::Span<const float>> logits = host->Decode(prompt);
      ASSERT_TRUE(logits.ok()) << logits.status();
      EXPECT_EQ(*s->DecodeSample(prompt, hot), HostDraw(*logits, prompt, hot))
          << "prompt of " << len << " n_batch " << n_batch;
    }
  }
}

// The draws are not the greedy picks, and another seed draws other tokens.
TEST_F(SessionSampleTest, DrawsDependOnTheSeed) {
  auto model = Load(&dev0_);
  auto s = *LlamaSession::Create(*model, so_);
  std::vector<int32_t> greedy = {*s->DecodeGreedy(kPrompt)};
  ASSERT_TRUE(s->GenerateGreedy(greedy.back(), 30, testing::AppendTo(greedy)).ok());
  const std::vector<int32_t> seven = HostGeneration(Defaults(7), 30);
  EXPECT_NE(seven, greedy);
  EXPECT_NE(seven, HostGeneration(Defaults(8), 30));
}

// Split by layers (the scheduler, one step at a time; the penalty window on the output
// device): the host's draws.
TEST_F(SessionSampleTest, LayerSplitDrawsWhatTheHostDraws) {
  LoadOptions split;
  split.plan = DevicePlan{SplitMode::kLayer, {&dev0_, &dev1_}, {0.5f, 0.5f}};
  auto model = *LlamaModel::Load(path_, split);
  ASSERT_TRUE(model->multi_device());
  for (const SamplingParams& p : {Defaults(7), Penalized(5)}) {
    auto s = *LlamaSession::Create(*model, so_);
    EXPECT_EQ(DeviceGeneration(*s, p, 24), HostGeneration(p, 24))
        << "penalty window " << p.penalty_last_n;
  }
}

// Generation stopped early discards the steps queued ahead (their picks never reach the
// penalty window); resumed from a token of the caller's choosing, it draws what the host
// draws after that token.
TEST_F(SessionSampleTest, ResumesAfterDiscardedStepsFromTheCallersToken) {
  testing::EventCpuDevice events("EV");
  auto model = Load(&events);
  const SamplingParams p = Penalized(99);
  constexpr int32_t kForced = 300;
  std::vector<int32_t> forced(12, -1);
  forced[10] = kForced;  // the caller replaces the 11th pick.
  const std::vector<int32_t> want = HostGeneration(p, 30, forced);
  so_.greedy_batch = 4;
  auto s = *LlamaSession::Create(*model, so_);
  std::vector<int32_t> got = {*s->DecodeSample(kPrompt, p)};
  ASSERT_TRUE(s->Generate(got.back(), 30, p, testing::AppendTo(got, 11)).ok());
  ASSERT_EQ(got.size(), 11u);
  EXPECT_EQ(s->n_past(), static_cast<int64_t>(kPrompt.size()) + 10);
  got.back() = kForced;
  ASSERT_TRUE(s->Generate(kForced, 20, p, testing::AppendTo(got)).ok());
  EXPECT_EQ(got, want);
}

TEST_F(SessionSampleTest, BadParametersAreInvalidArguments) {
  auto model = Load(&dev0_);
  auto s = *LlamaSession::Create(*model, so_);
  SamplingParams p = Penalized(1);
  p.penalty_last_n = so_.n_ctx + 1;
  EXPECT_THAT(s->DecodeSample(kPrompt, p).status().message(),
              ::testing::HasSubstr("window 65 outside [0, 64]"));
  p = Defaults(1);
  p.sample.top_p = 2.0f;
  absl::StatusOr<int32_t> bad = s->DecodeSample(kPrompt, p);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("top_p 2"));
  EXPECT_EQ(s->n_past(), 0);
}

}  // namespace
}  // namespace tg
