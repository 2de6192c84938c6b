// ROPE as the CUDA kernel computes it (rope_math.h, one element at a time with its pair's
// partner) against the f64 reference op.
#include "backends/cuda/rope_math.h"

#include <cmath>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "core/context.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "reference/reference_ops.h"
#include "tests/lib/test_util.h"

namespace tg::cuda {
namespace {

struct RopeCase {
  const char* name;
  int64_t head_dim, n_head, n_tok;
  RopeParams p;
  bool freq_factors;
  int32_t first_pos;
};

TEST(RopeMathTest, KernelElementMathMatchesReference) {
  RopeParams normal;
  normal.n_dims = 16;
  RopeParams neox_partial;
  neox_partial.n_dims = 12;
  neox_partial.mode = kRopeNeox;
  neox_partial.freq_base = 500000.0f;
  RopeParams yarn;
  yarn.n_dims = 16;
  yarn.mode = kRopeNeox;
  yarn.n_ctx_orig = 4096;
  yarn.freq_scale = 0.25f;
  yarn.ext_factor = 1.0f;
  yarn.attn_factor = 0.9f;
  const RopeCase cases[] = {
      {"normal", 16, 3, 5, normal, false, 0},
      {"neox partial, far positions", 18, 2, 4, neox_partial, false, 100000},
      {"yarn with factors", 16, 2, 3, yarn, true, 7},
  };
  for (const RopeCase& c : cases) {
    Context ctx;
    Tensor* a = *ctx.NewTensor(DType::kF32, {c.head_dim, c.n_head, c.n_tok});
    Tensor* pos = *ctx.NewTensor(DType::kI32, {c.n_tok});
    Tensor* ff = c.freq_factors ? *ctx.NewTensor(DType::kF32, {c.p.n_dims / 2}) : nullptr;
    absl::StatusOr<Tensor*> node = Rope(ctx, a, pos, ff, c.p);
    ASSERT_TRUE(node.ok()) << node.status();
    std::vector<float> x = testing::RandomFloats(a->NumElements(), 51);
    std::vector<int32_t> positions(c.n_tok);
    for (int64_t t = 0; t < c.n_tok; ++t) positions[t] = c.first_pos + 3 * static_cast<int32_t>(t);
    std::vector<float> factors = testing::RandomFloats(c.p.n_dims / 2, 52, 1.0f, 4.0f);
    std::vector<float> want(a->NumElements());
    a->data = x.data();
    pos->data = positions.data();
    if (ff != nullptr) ff->data = factors.data();
    (*node)->data = want.data();
    ASSERT_TRUE(ref::Compute(*node).ok());

    const RopeArgs args = RopeArgsOf(c.p);
    double worst = 0.0;
    for (int64_t k = 0; k < a->NumElements(); ++k) {
      const int64_t i0 = k % c.head_dim, row = k / c.head_dim, t = row / c.n_head;
      const float* r = x.data() + row * c.head_dim;
      float got = r[i0];
      if (i0 < args.n_dims) {
        const RopePair p = RopePairOf(args, static_cast<int>(i0));
        float cs, sn;
        RopeCosSin(args, p.pair, ff != nullptr ? factors[p.pair] : 1.0f, positions[t], &cs, &sn);
        got = RopeRotate(p.first, r[i0], r[p.partner], cs, sn);
      }
      worst = std::max(worst, std::fabs(static_cast<double>(got) - want[k]));
    }
    EXPECT_LT(worst, 2e-6) << c.name;
  }
}

TEST(RopeMathTest, PairsCoverEveryRotatedElementOnce) {
  for (bool neox : {false, true}) {
    RopeArgs r;
    r.n_dims = 10;
    r.neox = neox;
    std::vector<int> firsts(5, 0), seconds(5, 0);
    for (int i0 = 0; i0 < r.n_dims; ++i0) {
      const RopePair p = RopePairOf(r, i0);
      ASSERT_GE(p.pair, 0);
      ASSERT_LT(p.pair, 5);
      EXPECT_EQ(RopePairOf(r, p.partner).partner, i0);  // partners are mutual.
      EXPECT_NE(RopePairOf(r, p.partner).first, p.first);
      ++(p.first ? firsts : seconds)[p.pair];
    }
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(firsts[i] == 1 && seconds[i] == 1) << i;
  }
}

}  // namespace
}  // namespace tg::cuda
