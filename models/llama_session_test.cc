// LlamaSession on a real model (stories260K): split by layers over two devices it decodes as
// on one (pipelined prompt batches, sequential single tokens, tied embeddings), greedy
// decoding on the device picks the logits' argmax, and decode steps reuse their graph.
#include "models/llama_session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "models/executor_testing.h"
#include "models/llama_model.h"
#include "models/shared_model_path.h"

namespace tg {
namespace {

// A real model split by layers over two devices decodes as on one: prompt batches (pipelined
// in micro-batches, with every row's logits), then single tokens (sequential splits).
class LayerSplitSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = DemoModelPath();
    if (!std::ifstream(path_).good()) GTEST_SKIP() << path_ << " not found";
  }

  // stories260K without output.weight: the head reads the token embeddings.
  std::string WriteTiedCopy() {
    auto file = *GgufFile::Open(path_);
    GgufWriter w(file->alignment());
    for (const auto& [key, value] : file->metadata()) w.SetValue(key, value);
    for (const GgufTensorInfo& t : file->tensors()) {
      if (t.name == "output.weight") continue;
      EXPECT_TRUE(w.AddTensor(t.name, t.type, absl::MakeConstSpan(t.ne, t.n_dims),
                              absl::MakeConstSpan(t.data, t.nbytes))
                      .ok());
    }
    // Per process: other build trees may run this test at the same time.
    const std::string tied =
        absl::StrCat(::testing::TempDir(), "/stories260K_tied_", getpid(), ".gguf");
    EXPECT_TRUE(w.WriteFile(tied).ok());
    return tied;
  }

  // `path` loaded on CPU0 alone, and split by layers over CPU0 and CPU1.
  std::unique_ptr<LlamaModel> OnOneDevice(const std::string& path) {
    LoadOptions one;
    one.plan = DevicePlan{SplitMode::kNone, {&dev0_}, {1.0f}};
    return *LlamaModel::Load(path, one);
  }
  std::unique_ptr<LlamaModel> SplitByLayers(const std::string& path) {
    LoadOptions split;
    split.plan = DevicePlan{SplitMode::kLayer, {&dev0_, &dev1_}, {0.5f, 0.5f}};
    return *LlamaModel::Load(path, split);
  }

  void ExpectSameAsOneDevice(const std::string& path) {
    auto ref_model = OnOneDevice(path);
    auto model = SplitByLayers(path);
    ASSERT_TRUE(model->multi_device());
    EXPECT_EQ(model->placement().Describe(),
              "CPU0: layers 0-2, embeddings; CPU1: layers 3-4, output");
    EXPECT_EQ(model->n_params(), ref_model->n_params());
    EXPECT_EQ(model->weight_bytes(), ref_model->weight_bytes());
    std::vector<int32_t> prompt;
    for (int i = 0; i < 37; ++i) prompt.push_back((i * 53 + 7) % 512);
    SessionOptions so;
    so.n_ctx = 128;
    so.kv_type = DType::kF32;
    auto ref = *LlamaSession::Create(*ref_model, so);
    const absl::Span<const float> ref_prompt = *ref->Decode(prompt, /*all_logits=*/true);
    const std::vector<float> expected(ref_prompt.begin(), ref_prompt.end());
    const int32_t next = 42;
    ASSERT_TRUE(ref->Decode({&next, 1}).ok());
    const absl::Span<const float> ref_next = *ref->Decode({&next, 1});  // two tokens in.
    const std::vector<float> expected_next(ref_next.begin(), ref_next.end());
    for (int n_copies : {1, 2, 4}) {
      for (int64_t n_batch : {512, 10}) {
        so.n_copies = n_copies;
        so.n_batch = n_batch;
        so.min_micro_batch = 1;
        auto s = *LlamaSession::Create(*model, so);
        for (int round = 0; round < 2; ++round) {  // the second reuses the compute memory.
          s->Reset();
          absl::StatusOr<absl::Span<const float>> logits = s->Decode(prompt, true);
          ASSERT_TRUE(logits.ok()) << logits.status();
          EXPECT_THAT(*logits, ::testing::Pointwise(::testing::FloatNear(1e-4), expected))
              << "n_copies " << n_copies << " n_batch " << n_batch;
          ASSERT_TRUE(s->Decode({&next, 1}).ok());
          logits = s->Decode({&next, 1});
          ASSERT_TRUE(logits.ok());
          EXPECT_THAT(*logits, ::testing::Pointwise(::testing::FloatNear(1e-4), expected_next));
        }
        EXPECT_EQ(s->timings().splits, 2 * s->timings().graphs);
        EXPECT_GT(s->timings().transfer_us, 0);
      }
    }
  }

  std::string path_;
  cpu::CpuDevice dev0_{"CPU0", "cpu:0", 1};
  cpu::CpuDevice dev1_{"CPU1", "cpu:1", 1};
};

TEST_F(LayerSplitSessionTest, MatchesOneDevice) { ExpectSameAsOneDevice(path_); }

// Tied embeddings with the head on another device than the embeddings: the table is
// duplicated there (as llama.cpp does), not copied every token.
TEST_F(LayerSplitSessionTest, TiedEmbeddingsMatchOneDevice) {
  const std::string tied = WriteTiedCopy();
  LoadOptions split;
  split.plan = DevicePlan{SplitMode::kLayer, {&dev0_, &dev1_}, {0.5f, 0.5f}};
  auto model = *LlamaModel::Load(tied, split);
  EXPECT_NE(model->output(), model->tok_embd());
  EXPECT_EQ(model->output()->buffer->type()->device(), &dev1_);
  EXPECT_EQ(model->tok_embd()->buffer->type()->device(), &dev0_);
  ExpectSameAsOneDevice(tied);
  std::remove(tied.c_str());
}

// Greedy decoding on the device (ARGMAX in the graph) picks what the host picks from the
// logits, for prompts in several batches, pipelined micro-batches and single tokens.
TEST_F(LayerSplitSessionTest, DecodeGreedyPicksTheArgmaxOfTheLogits) {
  LoadOptions one;
  one.plan = DevicePlan{SplitMode::kNone, {&dev0_}, {1.0f}};
  LoadOptions split;
  split.plan = DevicePlan{SplitMode::kLayer, {&dev0_, &dev1_}, {0.5f, 0.5f}};
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back((i * 29 + 3) % 512);
  for (const LoadOptions& lo : {one, split}) {
    auto model = *LlamaModel::Load(path_, lo);
    for (const auto& [n_copies, n_batch] : {std::pair{1, 512}, {4, 512}, {4, 10}}) {
      SCOPED_TRACE(absl::StrCat(model->multi_device() ? "layer split" : "one device", " n_copies ",
                                n_copies, " n_batch ", n_batch));
      SessionOptions so;
      so.n_ctx = 128;
      so.n_copies = n_copies;
      so.n_batch = n_batch;
      so.min_micro_batch = 1;
      auto host = *LlamaSession::Create(*model, so);
      auto device = *LlamaSession::Create(*model, so);
      absl::StatusOr<absl::Span<const float>> logits = host->Decode(prompt);
      absl::StatusOr<int32_t> picked = device->DecodeGreedy(prompt);
      for (int step = 0; step < 12; ++step) {
        ASSERT_TRUE(logits.ok()) << logits.status();
        ASSERT_TRUE(picked.ok()) << picked.status();
        const int32_t want = static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) -
                                                  logits->begin());
        ASSERT_EQ(*picked, want) << "step " << step;
        logits = host->Decode({&want, 1});
        picked = device->DecodeGreedy({&want, 1});
      }
      EXPECT_EQ(device->n_past(), host->n_past());
    }
  }
}

// --deterministic: a prompt decoded in one call, split by layers with pipelined micro-batches,
// gives the bits of decoding it one token per call on one device (a failover's rebuild of the
// cache is such a call). Without it, the prompt's batches take other kernels (GEMMs).
TEST_F(LayerSplitSessionTest, DeterministicPromptHasTheBitsOfTokenByToken) {
  auto ref_model = OnOneDevice(path_);
  auto model = SplitByLayers(path_);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 53 + 7) % 512);
  SessionOptions so;
  so.n_ctx = 128;
  so.n_copies = 4;
  auto stepwise = *LlamaSession::Create(*ref_model, so);
  std::vector<float> want;
  for (int32_t t : prompt) {
    const absl::Span<const float> l = *stepwise->Decode({&t, 1});
    want.insert(want.end(), l.begin(), l.end());
  }
  so.deterministic = true;
  auto s = *LlamaSession::Create(*model, so);
  const absl::StatusOr<absl::Span<const float>> got = s->Decode(prompt, /*all_logits=*/true);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  EXPECT_EQ(std::memcmp(got->data(), want.data(), want.size() * sizeof(float)), 0);
}

// Decode steps within one kv_pad block run the session's previous graph again (no build, no
// allocation), with the logits of a session that builds every step (kv_pad 1).
TEST_F(LayerSplitSessionTest, DecodeStepsReuseTheGraphOfTheirPadBlock) {
  LoadOptions one;
  one.plan = DevicePlan{SplitMode::kNone, {&dev0_}, {1.0f}};
  auto model = *LlamaModel::Load(path_, one);
  SessionOptions so;
  so.n_ctx = 128;
  so.kv_type = DType::kF32;
  so.kv_pad = 16;
  auto padded = *LlamaSession::Create(*model, so);
  so.kv_pad = 1;
  auto exact = *LlamaSession::Create(*model, so);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  absl::StatusOr<absl::Span<const float>> a = padded->Decode(prompt);
  absl::StatusOr<absl::Span<const float>> b = exact->Decode(prompt);
  for (int step = 0; step < 40; ++step) {
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_THAT(*a, ::testing::Pointwise(::testing::FloatNear(1e-5), *b)) << "step " << step;
    const int32_t next = (step * 37 + 11) % 512;
    a = padded->Decode({&next, 1});
    b = exact->Decode({&next, 1});
  }
  // The prompt's graph, then one decode graph per block: n_kv 16, 32 and 48.
  EXPECT_EQ(padded->graphs_built(), 4);
  EXPECT_EQ(exact->graphs_built(), 41);
}

// A device whose CreateEvent fails for another reason than UNIMPLEMENTED fails Create (the
// session would otherwise quietly lose greedy queue-ahead); UNIMPLEMENTED only turns it off.
TEST_F(LayerSplitSessionTest, CreateFailsWhenTheDeviceFailsToCreateEvents) {
  testing::EventCpuDevice broken("EVI", absl::InternalError("event pool exhausted"));
  testing::EventCpuDevice without("EVU", absl::UnimplementedError("events not supported"));
  SessionOptions so;
  so.n_ctx = 64;
  for (Device* device : std::vector<Device*>{&broken, &without}) {
    LoadOptions lo;
    lo.device = device;
    auto model = LlamaModel::Load(path_, lo);
    ASSERT_TRUE(model.ok()) << model.status();
    absl::StatusOr<std::unique_ptr<LlamaSession>> s = LlamaSession::Create(**model, so);
    if (device == &broken) {
      EXPECT_TRUE(absl::IsInternal(s.status())) << s.status();
      EXPECT_THAT(s.status().message(), ::testing::HasSubstr("event pool exhausted"));
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.status();
    const std::vector<int32_t> prompt = {1, 403, 407};
    EXPECT_TRUE((*s)->Decode(prompt).ok());
  }
}

// On a local device with events, GenerateGreedy queues steps ahead (fed back on the device,
// in Stream batches) and produces DecodeGreedy's tokens on a plain CPU, across KV blocks.
TEST_F(LayerSplitSessionTest, GenerateGreedyQueuedAheadMatchesDecodeGreedy) {
  testing::EventCpuDevice events("EV");
  LoadOptions lo;
  lo.device = &events;
  auto model = *LlamaModel::Load(path_, lo);
  LoadOptions plain;
  plain.device = &dev0_;
  auto ref_model = *LlamaModel::Load(path_, plain);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  SessionOptions so;
  so.n_ctx = 64;
  so.kv_pad = 16;
  so.kv_type = DType::kF32;
  auto ref = *LlamaSession::Create(*ref_model, so);
  std::vector<int32_t> want = {*ref->DecodeGreedy(prompt)};
  for (int i = 0; i < 40; ++i) want.push_back(*ref->DecodeGreedy({&want.back(), 1}));
  for (int greedy_batch : {1, 3, 16, 0}) {
    SCOPED_TRACE(absl::StrCat("greedy_batch ", greedy_batch));
    so.greedy_batch = greedy_batch;
    events.batch_computes.clear();
    auto s = *LlamaSession::Create(*model, so);
    std::vector<int32_t> got = {*s->DecodeGreedy(prompt)};
    ASSERT_TRUE(s->GenerateGreedy(got.back(), 40, testing::AppendTo(got)).ok());
    EXPECT_EQ(got, want);
    EXPECT_EQ(s->n_past(), static_cast<int64_t>(prompt.size()) + 40);
    EXPECT_FALSE(events.batch_computes.empty());  // the steps went in Stream batches.
    // The prompt's graph, then one per KV block the steps touch: n_kv 16, 32, 48.
    EXPECT_EQ(s->graphs_built(), 4);
  }
}

}  // namespace
}  // namespace tg
