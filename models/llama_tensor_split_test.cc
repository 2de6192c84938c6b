// --split-mode tensor's decisions for llama weights and KV cache (models/llama_tensor_split.h).
#include "models/llama_tensor_split.h"

#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

LlamaHParams Shape(int64_t embd, int64_t ff, int64_t heads, int64_t kv_heads) {
  LlamaHParams hp;
  hp.n_vocab = 300;
  hp.n_embd = embd;
  hp.n_ff = ff;
  hp.n_layer = 2;
  hp.n_head = heads;
  hp.n_head_kv = kv_heads;
  hp.head_dim = embd / heads;
  hp.n_rot = hp.head_dim;
  return hp;
}

class LlamaSplitTest : public ::testing::Test {
 protected:
  std::string Split(const meta::SplitFn& fn, const std::string& name, DType type,
                    std::initializer_list<int64_t> ne) {
    Tensor* t = *ctx_.NewTensor(type, ne);
    t->SetName(name);
    absl::StatusOr<meta::SplitState> s = fn(*t);
    if (!s.ok()) return std::string(s.status().message());
    EXPECT_TRUE(s->Validate(*t, s->is_axis() ? s->n_devices() : 0).ok()) << name;
    return s->ToString();
  }
  Context ctx_;
};

TEST_F(LlamaSplitTest, HeadsStayWithTheirKvHead) {
  // stories260K: 8 heads of 8 over 4 KV heads, n_ff 172.
  const meta::SplitFn fn = LlamaSplitFn(Shape(64, 172, 8, 4), {0.5f, 0.5f});
  EXPECT_EQ(Split(fn, "blk.0.attn_q.weight", DType::kF32, {64, 64}), "AXIS_1[0:32|32:64]");
  EXPECT_EQ(Split(fn, "blk.0.attn_k.weight", DType::kF32, {64, 32}), "AXIS_1[0:16|16:32]");
  EXPECT_EQ(Split(fn, "blk.0.attn_v.weight", DType::kF32, {64, 32}), "AXIS_1[0:16|16:32]");
  EXPECT_EQ(Split(fn, "blk.0.attn_output.weight", DType::kF32, {64, 64}), "AXIS_0[0:32|32:64]");
  EXPECT_EQ(Split(fn, "cache_k_l1", DType::kF16, {32, 128}), "AXIS_0[0:16|16:32]");
  EXPECT_EQ(Split(fn, "blk.0.ffn_gate.weight", DType::kF32, {64, 172}), "AXIS_1[0:86|86:172]");
  EXPECT_EQ(Split(fn, "blk.0.ffn_up.weight", DType::kF32, {64, 172}), "AXIS_1[0:86|86:172]");
  EXPECT_EQ(Split(fn, "blk.0.ffn_down.weight", DType::kF32, {172, 64}), "AXIS_0[0:86|86:172]");
  EXPECT_EQ(Split(fn, "output.weight", DType::kF32, {64, 300}), "AXIS_1[0:150|150:300]");
  EXPECT_EQ(Split(fn, "token_embd.weight", DType::kF32, {64, 300}), "MIRRORED");
  EXPECT_EQ(Split(fn, "blk.0.attn_norm.weight", DType::kF32, {64}), "MIRRORED");
  EXPECT_EQ(Split(fn, "blk.1.attn_q_norm.weight", DType::kF32, {8}), "MIRRORED");
}

TEST_F(LlamaSplitTest, QuantBlocksSetTheGranularity) {
  // stories15M shape in Q8_0: 6 heads of 48. Told nothing of attn_output's blocks, the heads
  // go 3 + 3; the head cut (144) is not a block bound, so attn_output is cut at whole blocks
  // (160) and its input regathered.
  const meta::SplitFn fn = LlamaSplitFn(Shape(288, 768, 6, 6), {0.5f, 0.5f});
  EXPECT_EQ(Split(fn, "blk.0.attn_q.weight", DType::kQ8_0, {288, 288}), "AXIS_1[0:144|144:288]");
  EXPECT_EQ(Split(fn, "blk.0.attn_output.weight", DType::kQ8_0, {288, 288}),
            "AXIS_0[0:160|160:288]");
  // Told its blocks of 32, the heads go in pairs (96 columns, three blocks): 4 + 2, within
  // 1.5x of 3, and attn_output follows them (no gather); the KV cache as well.
  const meta::SplitFn aligned = LlamaSplitFn(Shape(288, 768, 6, 6), {0.5f, 0.5f}, false, 32);
  EXPECT_EQ(Split(aligned, "blk.0.attn_q.weight", DType::kQ8_0, {288, 288}),
            "AXIS_1[0:192|192:288]");
  EXPECT_EQ(Split(aligned, "blk.0.attn_output.weight", DType::kQ8_0, {288, 288}),
            "AXIS_0[0:192|192:288]");
  EXPECT_EQ(Split(aligned, "cache_k_l0", DType::kF16, {288, 64}), "AXIS_0[0:192|192:288]");
  EXPECT_EQ(Split(fn, "blk.0.ffn_gate.weight", DType::kQ8_0, {288, 768}), "AXIS_1[0:384|384:768]");
  EXPECT_EQ(Split(fn, "blk.0.ffn_down.weight", DType::kQ8_0, {768, 288}), "AXIS_0[0:384|384:768]");
  // With K-quants (256) the feed-forward of 768 is three blocks: 512 | 256.
  const meta::SplitFn k = LlamaSplitFn(Shape(512, 768, 8, 8), {0.5f, 0.5f});
  EXPECT_EQ(Split(k, "blk.0.ffn_gate.weight", DType::kQ4_K, {512, 768}), "AXIS_1[0:512|512:768]");
  EXPECT_EQ(Split(k, "blk.0.ffn_down.weight", DType::kQ6_K, {768, 512}), "AXIS_0[0:512|512:768]");
}

TEST_F(LlamaSplitTest, HeadsStayOneByOneWhereBlockAlignedGroupsUnbalance) {
  // 6 heads of 48 over three devices: pairs give 2 + 2 + 2, aligned and balanced.
  const meta::SplitFn three =
      LlamaSplitFn(Shape(288, 768, 6, 6), {1.0f / 3, 1.0f / 3, 1.0f / 3}, false, 32);
  EXPECT_EQ(Split(three, "blk.0.attn_output.weight", DType::kQ8_0, {288, 288}),
            "AXIS_0[0:96|96:192|192:288]");
  // 6 heads of 48 with -ts 0.5,0.25,0.25: pairs would give 4 + 0 + 2, none to a device
  // that one by one gets 2; so 3 + 2 + 1.
  EXPECT_EQ(Split(LlamaSplitFn(Shape(288, 768, 6, 6), {0.5f, 0.25f, 0.25f}, false, 32),
                  "blk.0.attn_k.weight", DType::kQ8_0, {288, 288}),
            "AXIS_1[0:144|144:240|240:288]");
  // 10 heads of 48 over four devices: pairs would give 2 + 4 + 2 + 2, the second 1.6x its
  // share of 2.5; so one by one (3 + 2 + 3 + 2), and attn_output is cut at whole blocks.
  const meta::SplitFn four =
      LlamaSplitFn(Shape(480, 768, 10, 10), {0.25f, 0.25f, 0.25f, 0.25f}, false, 32);
  EXPECT_EQ(Split(four, "blk.0.attn_q.weight", DType::kQ8_0, {480, 480}),
            "AXIS_1[0:144|144:240|240:384|384:480]");
  EXPECT_EQ(Split(four, "blk.0.attn_output.weight", DType::kQ8_0, {480, 480}),
            "AXIS_0[0:128|128:256|256:352|352:480]");
}

TEST_F(LlamaSplitTest, MoreDevicesThanKvHeadsLeavesSomeWithoutHeads) {
  // 6 heads over 3 KV heads on 4 devices: one device gets no attention, all get feed-forward.
  const meta::SplitFn fn = LlamaSplitFn(Shape(96, 256, 6, 3), {0.25f, 0.25f, 0.25f, 0.25f});
  EXPECT_EQ(Split(fn, "blk.0.attn_k.weight", DType::kF32, {96, 48}),
            "AXIS_1[0:16|16:32|32:32|32:48]");
  EXPECT_EQ(Split(fn, "blk.0.ffn_up.weight", DType::kF32, {96, 256}),
            "AXIS_1[0:64|64:128|128:192|192:256]");
}

TEST_F(LlamaSplitTest, CreatesAMetaDeviceOrSaysWhyNot) {
  cpu::CpuDevice a("A", "a", 1);
  cpu::CpuDevice b("B", "b", 1);
  DevicePlan plan{SplitMode::kTensor, {&a, &b}, {0.75f, 0.25f}};
  absl::StatusOr<std::unique_ptr<Device>> dev = CreateTensorSplitDevice(Shape(64, 172, 8, 4), plan);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ((*dev)->name(), "META(A,B)");
  plan.proportions = {1.0f};
  EXPECT_EQ(CreateTensorSplitDevice(Shape(64, 172, 8, 4), plan).status().code(),
            absl::StatusCode::kInvalidArgument);
  plan.proportions = {0.5f, 0.5f};
  EXPECT_EQ(CreateTensorSplitDevice(Shape(64, 172, 6, 4), plan).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Mixture-of-experts weights: the width F of every expert cut like the dense feed-forward
// (gate/up rows, down input columns, whole quant blocks), the router mirrored; with
// --expert-split whole experts per device.
TEST_F(LlamaSplitTest, ExpertsAreCutByWidthInWholeBlocks) {
  // Qwen3-30B-A3B's expert width 768 over 3 devices in Q8_0: 256 each.
  const meta::SplitFn fn = LlamaSplitFn(Shape(256, 1024, 8, 4), {1.0f / 3, 1.0f / 3, 1.0f / 3});
  EXPECT_EQ(Split(fn, "blk.0.ffn_gate_inp.weight", DType::kF32, {256, 16}), "MIRRORED");
  EXPECT_EQ(Split(fn, "blk.0.ffn_gate_exps.weight", DType::kQ8_0, {256, 768, 16}),
            "AXIS_1[0:256|256:512|512:768]");
  EXPECT_EQ(Split(fn, "blk.0.ffn_up_exps.weight", DType::kQ8_0, {256, 768, 16}),
            "AXIS_1[0:256|256:512|512:768]");
  EXPECT_EQ(Split(fn, "blk.0.ffn_down_exps.weight", DType::kQ8_0, {768, 256, 16}),
            "AXIS_0[0:256|256:512|512:768]");
  // -ts 3,1,1 in Q4_K blocks of 256: three blocks, 2 | 0 | 1 (an empty slice).
  const meta::SplitFn k = LlamaSplitFn(Shape(256, 1024, 8, 4), {0.6f, 0.2f, 0.2f});
  EXPECT_EQ(Split(k, "blk.1.ffn_up_exps.weight", DType::kQ4_K, {256, 768, 16}),
            "AXIS_1[0:512|512:512|512:768]");
  EXPECT_EQ(Split(k, "blk.1.ffn_down_exps.weight", DType::kQ6_K, {768, 256, 16}),
            "AXIS_0[0:512|512:512|512:768]");
  // The dense feed-forward keeps its own unit and width.
  EXPECT_EQ(Split(k, "blk.1.ffn_gate.weight", DType::kF32, {256, 1024}),
            "AXIS_1[0:614|614:819|819:1024]");
}

TEST_F(LlamaSplitTest, ExpertSplitPlacesWholeExperts) {
  const meta::SplitFn fn = LlamaSplitFn(Shape(64, 128, 4, 2), {0.6f, 0.2f, 0.2f}, true);
  EXPECT_EQ(Split(fn, "blk.0.ffn_gate_inp.weight", DType::kF32, {64, 8}), "MIRRORED");
  for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight"}) {
    EXPECT_EQ(Split(fn, name, DType::kQ8_0, {64, 96, 8}), "AXIS_2[0:5|5:6|6:8]") << name;
  }
  EXPECT_EQ(Split(fn, "blk.0.ffn_down_exps.weight", DType::kQ8_0, {96, 64, 8}),
            "AXIS_2[0:5|5:6|6:8]");
}

}  // namespace
}  // namespace tg
