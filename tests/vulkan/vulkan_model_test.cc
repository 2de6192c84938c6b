// The synthetic 15M-shape llama (tg-gguf synth --dims 288,768,6,6,6,32000) in Q8_0, Q4_0, Q4_K
// and the K-quant mixes q4_k_m and q5_k (and F32 as a control) on Vulkan0 against the CPU
// device. The CPU generates 64 greedy
// tokens; Vulkan0 decodes the same tokens (teacher forcing) and must pick the CPU's token at
// every step, except where the CPU's own choice was a near tie: the logit of Vulkan0's pick
// within tie_tol (a share of the logit range) of the CPU's best. Every logit must agree to
// logit_tol of the range. With quantized weights the activations are rounded to Q8_0/Q8_K as
// on the CPU; a value that float summation order puts on the other side of a rounding
// boundary moves by a whole quantum, which is what sets the tolerances of the quantized types
// (the CPU itself is compared with ggml at 2% of the range for them). A qwen3moe of the same
// shape (16 experts, 4 used) runs the MoE router's ops (SOFT_MAX, TOP_K, SUM_ROWS, DIV,
// MUL_MAT_ID) on Vulkan0 too, and a gpt-oss with MXFP4 experts its attention sinks, expert
// biases and sliding-window layers; the q5_k_m mix holds Q5_K, Q6_K and (rows of 288) the
// fallback types. Alone on Vulkan0 every node must run there: no graph may need the CPU
// beside it (DecodeTimings::fallback_graphs). Skips where no Vulkan device is present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/register_builtin.h"
#include "core/registry.h"
#include "models/batch_session.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "models/shared_model_path.h"
#include "models/synth/synth.h"
#include "models/synth/synth_options.h"
#include "tests/lib/batched_vs_alone.h"

namespace tg {
namespace {

constexpr int kSteps = 64;

struct Case {
  const char* type;
  double logit_tol;  // largest |logit difference| / range (observed: f32 2.3e-7; quantized
                     // types up to 6.8e-3, from activation values rounded to another quantum).
  double tie_tol;    // largest CPU gap / range a different pick may have (observed <= 4.2e-4).
  // Run Vulkan0 in a layer split with the CPU (5 of the 6 layers on Vulkan0) instead of alone.
  bool with_cpu = false;
  const char* arch = "llama";  // or a mixture of experts: qwen3moe, gpt-oss (tg-gguf synth).
};

struct Decoded {
  std::vector<int32_t> tokens;             // the CPU's greedy picks.
  std::vector<std::vector<float>> logits;  // per step.
  DecodeTimings timings;                   // fallback_graphs: graphs that needed the CPU.
};

std::string SynthModel(const std::string& type, const std::string& arch) {
  // The process id keeps cases that ctest runs side by side off each other's files.
  const std::string path = (std::filesystem::temp_directory_path() /
                            absl::StrCat("tg_vk_synth15m_", type, "_", arch, "_", getpid(), ".gguf"))
                               .string();
  std::vector<std::string> args = {path, "--dims", "288,768,6,6,6,32000", "--type", type};
  if (arch != "llama") {
    for (const char* a : {"--experts", "16", "--experts-used", "4", "--expert-ff", "192"}) {
      args.push_back(a);
    }
    args.push_back("--arch");
    args.push_back(arch);
  }
  if (arch == "gpt-oss") args[2] = "256,768,4,8,4,32000";  // heads of 32 (gpt-oss: n_head even).
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  absl::StatusOr<synth::SynthOptions> opts = synth::ParseSynthOptions(argv);
  if (!opts.ok()) return "";
  if (!synth::RunSynth(*opts, stderr).ok()) return "";
  return path;
}

// Decodes `prompt`, then `forced` (when given) or its own greedy picks, one token a step.
absl::StatusOr<Decoded> Decode(const std::string& path, const LoadOptions& lo,
                               const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>* forced) {
  absl::StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::Load(path, lo);
  if (!model.ok()) return model.status();
  SessionOptions so;
  so.n_ctx = 256;
  so.kv_type = DType::kF32;
  absl::StatusOr<std::unique_ptr<LlamaSession>> session = LlamaSession::Create(**model, so);
  if (!session.ok()) return session.status();
  Decoded run;
  std::vector<int32_t> next = prompt;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<absl::Span<const float>> logits = (*session)->Decode(next);
    if (!logits.ok()) return logits.status();
    run.logits.emplace_back(logits->begin(), logits->end());
    const int32_t pick =
        static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    run.tokens.push_back(pick);
    next = {forced != nullptr ? (*forced)[step] : pick};
  }
  run.timings = (*session)->timings();
  return run;
}

class VulkanModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(VulkanModelTest, TokensMatchTheCpuUpToNearTies) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> vk = Registry::Get().FindDevice("Vulkan0");
  if (!vk.ok()) GTEST_SKIP() << "no Vulkan device (lavapipe needs TG_VULKAN_CPU=1)";
  const Case& c = GetParam();
  const std::string path = SynthModel(c.type, c.arch);
  ASSERT_FALSE(path.empty());
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  LoadOptions on_cpu;
  on_cpu.device = Registry::Get().CpuDevice();
  absl::StatusOr<Decoded> cpu = Decode(path, on_cpu, prompt, nullptr);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  LoadOptions on_vk;
  on_vk.device = *vk;
  if (c.with_cpu) {
    on_vk.plan = {SplitMode::kLayer, {*vk, Registry::Get().CpuDevice()}, {5.0f / 6, 1.0f / 6}};
  }
  absl::StatusOr<Decoded> gpu = Decode(path, on_vk, prompt, &cpu->tokens);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::filesystem::remove(path);
  // Alone, Vulkan0 has a kernel for every node: no graph needed the CPU beside it.
  if (!c.with_cpu) {
    EXPECT_EQ(gpu->timings.fallback_graphs, 0) << gpu->timings.fallback_reason;
  }
  int ties = 0;
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float>& want = cpu->logits[s];
    const std::vector<float>& got = gpu->logits[s];
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    const double range = *hi - *lo;
    double diff = 0;
    for (size_t i = 0; i < want.size(); ++i)
      diff = std::max(diff, std::fabs(got[i] - want[i]) * 1.0);
    worst = std::max(worst, diff / range);
    EXPECT_LE(diff, c.logit_tol * range) << "step " << s;
    const int32_t pick = gpu->tokens[s];
    if (pick != cpu->tokens[s]) {
      const double gap = want[cpu->tokens[s]] - want[pick];
      EXPECT_LE(gap, c.tie_tol * range) << "step " << s << ": Vulkan0 picks " << pick
                                        << ", the CPU " << cpu->tokens[s] << " by " << gap;
      ++ties;
    }
  }
  std::printf("%s: %d steps, logits within %.1e of the range, %d near tie(s) picked otherwise\n",
              c.type, kSteps, worst, ties);
}

// q4_k holds Q4_K and (rows of 288 are no multiple of 256: llama.cpp's fallback) Q5_0
// tensors, q4_k_m also Q6_K ones, q5_k Q5_K and Q5_1 ones; all run on Vulkan0 alone, and q4_k
// once more split with the CPU by layers.
INSTANTIATE_TEST_SUITE_P(Synth15m, VulkanModelTest,
                         ::testing::Values(Case{"f32", 1e-5, 1e-5}, Case{"q8_0", 1e-2, 2e-3},
                                           Case{"q4_0", 1e-2, 2e-3}, Case{"q4_k", 1e-2, 2e-3},
                                           Case{"q4_k", 1e-2, 2e-3, true},
                                           Case{"q4_k_m", 1e-2, 2e-3}, Case{"q5_k", 1e-2, 2e-3},
                                           Case{"q5_k_m", 1e-2, 2e-3},
                                           Case{"f32", 1e-5, 1e-5, false, "qwen3moe"},
                                           Case{"mxfp4", 1e-2, 2e-3, false, "gpt-oss"}),
                         [](const auto& info) {
                           std::string arch = info.param.arch;
                           arch.erase(std::remove(arch.begin(), arch.end(), '-'), arch.end());
                           return absl::StrCat(info.param.type,
                                               info.param.with_cpu ? "_with_cpu" : "",
                                               arch == "llama" ? "" : "_" + arch);
                         });

// Many sequences at once (models/batch_session.h) on Vulkan0 alone: 1, 2, 4 and 8 sequences
// of stories260K decoded together give each the greedy tokens and logits (F32 KV, within
// 1e-4) it gets alone on Vulkan0, and no graph needs the CPU.
TEST(VulkanBatchSessionTest, BatchedEqualsAlone) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> vk = Registry::Get().FindDevice("Vulkan0");
  if (!vk.ok()) GTEST_SKIP() << "no Vulkan device (lavapipe needs TG_VULKAN_CPU=1)";
  const std::string path = DemoModelPath();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  LoadOptions on_vk;
  on_vk.device = *vk;
  auto model = LlamaModel::Load(path, on_vk);
  ASSERT_TRUE(model.ok()) << model.status();
  testing::ExpectBatchedEqualsAloneOnItsDevice(**model, /*steps=*/12, /*tol=*/1e-4);
}

}  // namespace
}  // namespace tg
