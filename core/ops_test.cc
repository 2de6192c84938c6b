// The graph builder and the shared shape rules: results have the documented shapes
// (docs/ops.md) and bad operands come back as INVALID_ARGUMENT, never an abort.
#include "core/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "core/context.h"
#include "core/shape_rules.h"

namespace tg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class BuilderTest : public ::testing::Test {
 protected:
  Tensor* T(DType type, std::initializer_list<int64_t> ne) {
    auto t = ctx_.NewTensor(type, ne);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  static std::vector<int64_t> Ne(const Tensor* t) {
    return {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
  }
  Context ctx_;
};

TEST_F(BuilderTest, ContextRejectsBadShapes) {
  EXPECT_EQ(ctx_.NewTensor(DType::kF32, {-1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ctx_.NewTensor(DType::kQ4_0, {33}).status().message(), HasSubstr("block size 32"));
  EXPECT_THAT(ctx_.NewTensor(DType::kF32, {1LL << 40, 1LL << 40}).status().message(),
              HasSubstr("too large"));
  EXPECT_FALSE(ctx_.NewTensor(DType::kF32, {1, 2, 3, 4, 5}).ok());
}

TEST_F(BuilderTest, MulMatShapes) {
  Tensor* a = T(DType::kQ4_0, {64, 10, 2});
  auto c = MulMat(ctx_, a, T(DType::kF32, {64, 7, 4, 3}));  // a broadcast over dims 2 and 3.
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(Ne(*c), ElementsAre(10, 7, 4, 3));
  Tensor* a2 = T(DType::kQ4_0, {64, 10, 2, 1});
  Tensor* b2 = T(DType::kF32, {64, 7, 4, 1});
  auto c2 = MulMat(ctx_, a2, b2);
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_THAT(Ne(*c2), ElementsAre(10, 7, 4, 1));
  EXPECT_EQ((*c2)->type, DType::kF32);
  EXPECT_TRUE((*c2)->IsContiguous());
  Tensor* wrong_k = T(DType::kF32, {32, 7});
  EXPECT_THAT(MulMat(ctx_, a2, wrong_k).status().message(), HasSubstr("inner dimensions differ"));
  Tensor* b3 = T(DType::kF32, {64, 7, 3});
  EXPECT_THAT(MulMat(ctx_, a2, b3).status().message(), HasSubstr("cannot broadcast"));
  Tensor* f16_act = T(DType::kF16, {64, 7});
  EXPECT_THAT(MulMat(ctx_, a2, f16_act).status().message(), HasSubstr("must be f32"));
}

TEST_F(BuilderTest, NullSourcesAreErrors) {
  EXPECT_THAT(MulMat(ctx_, nullptr, T(DType::kF32, {4})).status().message(),
              HasSubstr("source 0 is missing"));
  EXPECT_THAT(Add(ctx_, T(DType::kF32, {4}), nullptr).status().message(),
              HasSubstr("source 1 is missing"));
}

TEST_F(BuilderTest, BroadcastRules) {
  Tensor* a = T(DType::kF32, {6, 4, 2});
  EXPECT_TRUE(Add(ctx_, a, T(DType::kF32, {6})).ok());
  EXPECT_TRUE(Mul(ctx_, a, T(DType::kF32, {6, 1, 2})).ok());
  EXPECT_THAT(Add(ctx_, a, T(DType::kF32, {4})).status().message(), HasSubstr("cannot broadcast"));
}

TEST_F(BuilderTest, GetRowsAndSetRows) {
  Tensor* table = T(DType::kQ8_0, {64, 100});
  Tensor* idx = T(DType::kI32, {5});
  auto rows = GetRows(ctx_, table, idx);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(Ne(*rows), ElementsAre(64, 5, 1, 1));
  EXPECT_THAT(GetRows(ctx_, table, T(DType::kF32, {5})).status().message(), HasSubstr("i32"));
  Tensor* cache = T(DType::kF16, {64, 100});
  auto set = SetRows(ctx_, cache, T(DType::kF32, {64, 5}), idx);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->view_src, cache);
  EXPECT_FALSE(SetRows(ctx_, cache, T(DType::kF32, {32, 5}), idx).ok());
  EXPECT_FALSE(SetRows(ctx_, cache, T(DType::kF32, {64, 4}), idx).ok());
}

TEST_F(BuilderTest, ViewsStayInsideTheirBase) {
  Tensor* a = T(DType::kF32, {8, 4});  // 128 bytes
  auto v = View(ctx_, a, {4, 2}, {32}, 16);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->view_src, a);
  EXPECT_EQ((*v)->view_offs, 16u);
  auto vv = View(ctx_, *v, {2}, {}, 8);  // a view of a view points at the root.
  ASSERT_TRUE(vv.ok()) << vv.status();
  EXPECT_EQ((*vv)->view_src, a);
  EXPECT_EQ((*vv)->view_offs, 24u);
  EXPECT_THAT(View(ctx_, a, {8, 4}, {32}, 4).status().message(), HasSubstr("exceeds"));
  EXPECT_FALSE(View(ctx_, a, {8}, {32}, 0).ok());  // stride count must match dims.
}

TEST_F(BuilderTest, PermuteTransposeReshape) {
  Tensor* a = T(DType::kF32, {2, 3, 4, 5});
  auto p = Permute(ctx_, a, 0, 2, 1, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(Ne(*p), ElementsAre(2, 4, 3, 5));
  EXPECT_EQ((*p)->nb[1], a->nb[2]);
  EXPECT_FALSE((*p)->IsContiguous());
  EXPECT_THAT(Permute(ctx_, a, 0, 0, 1, 2).status().message(), HasSubstr("not a permutation"));
  auto t = Transpose(ctx_, a);
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(Ne(*t), ElementsAre(3, 2, 4, 5));
  EXPECT_THAT(Reshape(ctx_, *t, {6, 20}).status().message(), HasSubstr("not contiguous"));
  auto r = Reshape(ctx_, a, {6, 20});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(Ne(*r), ElementsAre(6, 20, 1, 1));
  EXPECT_THAT(Reshape(ctx_, a, {7, 20}).status().message(), HasSubstr("cannot reshape"));
  Tensor* q = T(DType::kQ4_0, {32, 2});
  EXPECT_THAT(Transpose(ctx_, q).status().message(), HasSubstr("quantized"));
}

TEST_F(BuilderTest, RopeSoftMaxFlashAttnRules) {
  Tensor* x = T(DType::kF32, {8, 4, 3});
  Tensor* pos = T(DType::kI32, {3});
  RopeParams rp;
  rp.n_dims = 8;
  EXPECT_TRUE(Rope(ctx_, x, pos, nullptr, rp).ok());
  rp.n_dims = 7;
  EXPECT_THAT(Rope(ctx_, x, pos, nullptr, rp).status().message(), HasSubstr("n_dims"));
  rp.n_dims = 8;
  rp.mode = 1;
  EXPECT_THAT(Rope(ctx_, x, pos, nullptr, rp).status().message(), HasSubstr("mode"));
  rp.mode = kRopeNeox;
  EXPECT_FALSE(Rope(ctx_, x, T(DType::kI32, {4}), nullptr, rp).ok());

  Tensor* scores = T(DType::kF32, {16, 5, 2});
  EXPECT_TRUE(SoftMax(ctx_, scores, T(DType::kF16, {16, 8}), 0.5f).ok());
  EXPECT_THAT(SoftMax(ctx_, scores, T(DType::kF16, {16, 4}), 0.5f).status().message(),
              HasSubstr("mask"));

  Tensor* q = T(DType::kF32, {64, 3, 8});
  Tensor* k = T(DType::kF16, {64, 10, 2});
  Tensor* v = T(DType::kF16, {64, 10, 2});
  auto fa = FlashAttn(ctx_, q, k, v, T(DType::kF16, {10, 4}), 0.125f);
  ASSERT_TRUE(fa.ok()) << fa.status();
  EXPECT_THAT(Ne(*fa), ElementsAre(64, 8, 3, 1));
  Tensor* k3 = T(DType::kF16, {64, 10, 3});
  EXPECT_THAT(FlashAttn(ctx_, q, k3, k3, nullptr, 1.0f).status().message(),
              HasSubstr("do not match"));
}

TEST_F(BuilderTest, SampleRule) {
  Tensor* logits = T(DType::kF32, {100, 3});
  Tensor* pos = T(DType::kI32, {3});
  Tensor* recent = T(DType::kI32, {16});
  auto s = Sample(ctx_, logits, pos, recent, {.top_k = 5, .seed = 0x1234'5678'9abc'def0ull});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->type, DType::kI32);
  EXPECT_THAT(Ne(*s), ElementsAre(1, 3, 1, 1));
  EXPECT_EQ(static_cast<uint32_t>((*s)->op_params[5]), 0x9abcdef0u);
  EXPECT_EQ(static_cast<uint32_t>((*s)->op_params[6]), 0x12345678u);
  EXPECT_TRUE(Sample(ctx_, logits, pos, nullptr, {}).ok());  // the window is optional.
  EXPECT_THAT(Sample(ctx_, logits, T(DType::kI32, {2}), nullptr, {}).status().message(),
              HasSubstr("one per row"));
  EXPECT_THAT(Sample(ctx_, logits, T(DType::kF32, {3}), nullptr, {}).status().message(),
              HasSubstr("must be i32"));
  EXPECT_THAT(Sample(ctx_, logits, pos, T(DType::kI32, {4, 4}), {}).status().message(),
              HasSubstr("1-d"));
  EXPECT_THAT(Sample(ctx_, T(DType::kF16, {100, 3}), pos, nullptr, {}).status().message(),
              HasSubstr("must be f32"));
  EXPECT_THAT(Sample(ctx_, logits, pos, nullptr, {.top_k = -1}).status().message(),
              HasSubstr("top_k -1"));
  EXPECT_THAT(Sample(ctx_, logits, pos, nullptr, {.top_p = 1.5f}).status().message(),
              HasSubstr("top_p 1.5"));
  EXPECT_THAT(Sample(ctx_, logits, pos, nullptr, {.min_p = -0.1f}).status().message(),
              HasSubstr("min_p"));
  EXPECT_THAT(Sample(ctx_, logits, pos, nullptr, {.repeat_penalty = 0}).status().message(),
              HasSubstr("repeat_penalty"));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(Sample(ctx_, logits, pos, nullptr, {.temperature = nan}).status().message(),
              HasSubstr("not finite"));
}

// Kernels read a node's parameters through RopeParamsOf / SampleParamsOf: each field comes
// back as built (all distinct, so two swapped slots would show).
TEST_F(BuilderTest, ParametersReadBackAsBuilt) {
  // Every field, in declaration order.
  const RopeParams rp{8, kRopeNeox, 4096, 500000.0f, 0.25f, 0.75f, 1.5f, 24.0f, 2.0f};
  auto rope = Rope(ctx_, T(DType::kF32, {8, 4, 3}), T(DType::kI32, {3}), nullptr, rp);
  ASSERT_TRUE(rope.ok()) << rope.status();
  const RopeParams r = RopeParamsOf(**rope);
  EXPECT_THAT(
      (std::vector<double>{double(r.n_dims), double(r.mode), double(r.n_ctx_orig), r.freq_base,
                           r.freq_scale, r.ext_factor, r.attn_factor, r.beta_fast, r.beta_slow}),
      ElementsAre(8, kRopeNeox, 4096, 500000, 0.25, 0.75, 1.5, 24, 2));

  const SampleParams sp{0.7f, 12, 0.9f, 0.02f, 1.3f, 0xfedc'ba98'7654'3210ull};
  auto sample = Sample(ctx_, T(DType::kF32, {100, 3}), T(DType::kI32, {3}), nullptr, sp);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(SampleParamsOf(**sample), sp);
}

// ggml_rope_yarn_corr_dims worked by hand: n_dims ln(n_ctx_orig / (beta 2 pi)) / (2 ln base).
TEST_F(BuilderTest, YarnRampIsGgmlsCorrectionRange) {
  // 128 ln(4096 / (32 2 pi)) / (2 ln 10000) = 20.94 -> 20; at beta 1: 45.03 -> 46.
  RopeParams p{.n_dims = 128, .n_ctx_orig = 4096, .freq_base = 10000.0f};
  EXPECT_EQ(YarnRampOf(p).lo, 20);
  EXPECT_EQ(YarnRampOf(p).hi, 46);
  // 8 ln(16 / (32 2 pi)) / (2 ln 10000) = -1.10 and 8 ln(16 / (2 pi)) / ... = 0.41: clamped
  // below at 0; the top (1) is inside [0, n_dims - 1].
  p.n_dims = 8;
  p.n_ctx_orig = 16;
  EXPECT_EQ(YarnRampOf(p).lo, 0);
  EXPECT_EQ(YarnRampOf(p).hi, 1);
  // A context so long that the slow end passes the last dimension: clamped to n_dims - 1.
  p.n_ctx_orig = 1 << 30;
  EXPECT_EQ(YarnRampOf(p).hi, 7);
}

// ROPE's output scale worked by hand: attn_factor alone without YaRN, times
// 1 + 0.1 ln(1 / freq_scale) with it: 1.5 (1 + 0.1 ln 4) = 1.70794415.
TEST_F(BuilderTest, RopeMscaleIsAttnFactorTimesYarnsFactor) {
  RopeParams p{.n_dims = 64, .freq_scale = 0.25f, .attn_factor = 1.5f};
  EXPECT_EQ(RopeMscaleOf(p), 1.5f);
  p.ext_factor = 1.0f;
  EXPECT_NEAR(RopeMscaleOf(p), 1.70794415, 1e-7);
}

TEST_F(BuilderTest, RouterOpRules) {
  Tensor* probs = T(DType::kF32, {16, 7});
  auto ids = TopK(ctx_, probs, 4);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(Ne(*ids), ElementsAre(4, 7, 1, 1));
  EXPECT_EQ((*ids)->type, DType::kI32);
  EXPECT_THAT(TopK(ctx_, probs, 17).status().message(), HasSubstr("k = 17 must be in [1, 16]"));
  EXPECT_THAT(TopK(ctx_, probs, 0).status().message(), HasSubstr("must be in [1"));
  EXPECT_THAT(TopK(ctx_, T(DType::kF16, {16, 7}), 2).status().message(), HasSubstr("must be f32"));

  auto order = Argsort(ctx_, probs, SortOrder::kDescending);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_THAT(Ne(*order), ElementsAre(16, 7, 1, 1));
  EXPECT_EQ((*order)->type, DType::kI32);
  EXPECT_THAT(Argsort(ctx_, probs, static_cast<SortOrder>(2)).status().message(),
              HasSubstr("order 2 unknown"));

  auto sum = SumRows(ctx_, probs);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_THAT(Ne(*sum), ElementsAre(1, 7, 1, 1));
  auto norm = Div(ctx_, probs, *sum);  // broadcast along the row.
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_THAT(Ne(*norm), ElementsAre(16, 7, 1, 1));
  EXPECT_THAT(Div(ctx_, probs, T(DType::kF32, {3, 7})).status().message(),
              HasSubstr("cannot broadcast"));
}

TEST_F(BuilderTest, SoftMaxSinksRule) {
  Tensor* scores = T(DType::kF32, {10, 5, 4});  // [n_kv, n_q, n_head]
  auto ok = SoftMax(ctx_, scores, nullptr, 0.5f, T(DType::kF32, {4}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(Ne(*ok), ElementsAre(10, 5, 4, 1));
  EXPECT_THAT(SoftMax(ctx_, scores, nullptr, 0.5f, T(DType::kF32, {3})).status().message(),
              HasSubstr("one per head"));
  EXPECT_THAT(SoftMax(ctx_, scores, nullptr, 0.5f, T(DType::kF16, {4})).status().message(),
              HasSubstr("must be f32"));
}

TEST_F(BuilderTest, CpyConversions) {
  Tensor* a = T(DType::kF32, {64, 2});
  EXPECT_TRUE(Cpy(ctx_, a, T(DType::kQ4_K, {256, 1, 1, 1})).status().code() ==
              absl::StatusCode::kInvalidArgument);  // quantized copy needs equal rows.
  EXPECT_TRUE(Cpy(ctx_, a, T(DType::kQ8_0, {64, 2})).ok());
  EXPECT_TRUE(Cpy(ctx_, a, T(DType::kF16, {128})).ok());
  EXPECT_THAT(Cpy(ctx_, T(DType::kQ8_0, {64, 2}), T(DType::kF16, {64, 2})).status().message(),
              HasSubstr("cannot convert"));
  EXPECT_THAT(Cpy(ctx_, a, T(DType::kF32, {64, 3})).status().message(), HasSubstr("element count"));
}

TEST_F(BuilderTest, ValidateNodeCatchesTampering) {
  Tensor* a = T(DType::kF32, {4, 3});
  Tensor* b = T(DType::kF32, {4, 2});
  auto c = MulMat(ctx_, a, b);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(ValidateNode(**c).ok());
  Tensor bad = **c;
  bad.ne[1] = 5;
  EXPECT_THAT(ValidateNode(bad).message(), HasSubstr("does not match its op's rule"));
  bad = **c;
  bad.nb[1] = 4;
  EXPECT_FALSE(ValidateNode(bad).ok());
  bad = **c;
  bad.op = static_cast<Op>(200);
  EXPECT_THAT(ValidateNode(bad).message(), HasSubstr("unknown op"));
  bad = **c;
  bad.src[2] = a;
  EXPECT_THAT(ValidateNode(bad).message(), HasSubstr("unexpected source"));
}

}  // namespace
}  // namespace tg
