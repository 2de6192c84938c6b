// Tests of the naive reference (tests/reference) against small hand-computed cases.
#include "reference/reference_ops.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numbers>
#include <vector>

#include "core/fp16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tg::ref {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

constexpr double kTol = 1e-6;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Owns hand-built tensors and their (zeroed) host storage for one test.
class Arena {
 public:
  Tensor* New(DType type, std::initializer_list<int64_t> ne) {
    Tensor& t = tensors_.emplace_back();
    t.type = type;
    int d = 0;
    for (int64_t n : ne) t.ne[d++] = n;
    SetContiguousStrides(&t);
    storage_.emplace_back(t.NumBytes() / 8 + 1);  // uint64_t words: 8-byte aligned.
    t.data = storage_.back().data();
    return &t;
  }
  Tensor* F32(std::initializer_list<int64_t> ne, const std::vector<float>& values) {
    Tensor* t = New(DType::kF32, ne);
    std::memcpy(t->data, values.data(), values.size() * sizeof(float));
    return t;
  }
  Tensor* I32(std::initializer_list<int64_t> ne, const std::vector<int32_t>& values) {
    Tensor* t = New(DType::kI32, ne);
    std::memcpy(t->data, values.data(), values.size() * sizeof(int32_t));
    return t;
  }
  // A result node of `op` over `src`, with its own contiguous storage.
  Tensor* Node(Op op, DType type, std::initializer_list<int64_t> ne,
               std::initializer_list<Tensor*> src) {
    Tensor* t = New(type, ne);
    t->op = op;
    int i = 0;
    for (Tensor* s : src) t->src[i++] = s;
    return t;
  }
  // A node aliasing `target` (CPY into it, SET_ROWS into it, or a view of it).
  Tensor* Alias(Op op, Tensor* target, std::initializer_list<Tensor*> src) {
    Tensor& t = tensors_.emplace_back(*target);
    t.op = op;
    t.view_src = target;
    std::fill(std::begin(t.src), std::end(t.src), nullptr);
    int i = 0;
    for (Tensor* s : src) t.src[i++] = s;
    return &t;
  }

 private:
  std::deque<Tensor> tensors_;
  std::deque<std::vector<uint64_t>> storage_;
};

// All elements of t in logical order (dim 0 fastest), read through ReadElement.
std::vector<double> Values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) {
        for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) v.push_back(ReadElement(t, i0, i1, i2, i3));
      }
    }
  }
  return v;
}

auto Near(std::vector<double> expected, double tol = kTol) {
  return Pointwise(DoubleNear(tol), expected);
}

TEST(ReferenceMulMat, TwoByThreeTimesThreeByTwo) {
  Arena arena;
  // a: rows (k fastest) [1 2 3], [4 5 6]; b: columns [7 8 9], [10 11 12].
  Tensor* a = arena.F32({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor* b = arena.F32({3, 2}, {7, 8, 9, 10, 11, 12});
  Tensor* dst = arena.Node(Op::kMulMat, DType::kF32, {2, 2}, {a, b});
  ASSERT_TRUE(Compute(dst).ok());
  // dst[m, n] = dot(a row m, b row n).
  EXPECT_THAT(Values(*dst), Near({50, 122, 68, 167}));
}

TEST(ReferenceMulMat, BroadcastsAOverDim2) {
  Arena arena;
  Tensor* a = arena.F32({2, 1, 2}, {1, 0, 0, 1});  // matrix 0 picks x, matrix 1 picks y.
  Tensor* b = arena.F32({2, 1, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor* dst = arena.Node(Op::kMulMat, DType::kF32, {1, 1, 4}, {a, b});
  ASSERT_TRUE(Compute(dst).ok());
  // b2 / a2 = 2: b matrices 0, 1 use a matrix 0; 2, 3 use a matrix 1.
  EXPECT_THAT(Values(*dst), Near({1, 3, 6, 8}));
}

TEST(ReferenceMulMat, ReadsQ8_0Weights) {
  Arena arena;
  Tensor* a = arena.New(DType::kQ8_0, {32, 1});
  std::vector<double> ones(32, 1.0);
  WriteRow(a, 0, 0, 0, ones.data());  // d = f16(1/127), q = 127: 1.0 up to d's rounding.
  Tensor* b = arena.F32({32, 1}, std::vector<float>(32, 2.0f));
  Tensor* dst = arena.Node(Op::kMulMat, DType::kF32, {1, 1}, {a, b});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_NEAR(ReadElement(*dst, 0, 0, 0, 0), 64.0, 64.0 * 1e-3);
}

// Q5_0 holds integers -16..15 exactly when -16 is the block's extreme (d = 1).
TEST(ReferenceMulMat, ReadsQ5_0WeightsExactly) {
  Arena arena;
  Tensor* a = arena.New(DType::kQ5_0, {32, 1});
  std::vector<double> w(32);
  for (int i = 0; i < 32; ++i) w[i] = i == 0 ? -16 : (i % 31) - 15;
  WriteRow(a, 0, 0, 0, w.data());
  std::vector<float> x(32);
  double want = 0;
  for (int i = 0; i < 32; ++i) {
    x[i] = static_cast<float>(i % 5);
    want += w[i] * x[i];
  }
  Tensor* b = arena.F32({32, 1}, x);
  Tensor* dst = arena.Node(Op::kMulMat, DType::kF32, {1, 1}, {a, b});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_DOUBLE_EQ(ReadElement(*dst, 0, 0, 0, 0), want);
}

// MXFP4 holds the E2M1 values times 2^k exactly: with amax 6 the scale is 1.
TEST(ReferenceGetRows, ReadsMXFP4RowsExactly) {
  Arena arena;
  const double kLevels[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  Tensor* a = arena.New(DType::kMXFP4, {32, 3});
  std::vector<double> rows(96);
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 32; ++i) rows[32 * r + i] = (i % 2 ? -1 : 1) * kLevels[(i + r) % 8];
    rows[32 * r + 31] = 6;
    WriteRow(a, r, 0, 0, rows.data() + 32 * r);
  }
  Tensor* idx = arena.I32({2}, {2, 0});
  Tensor* dst = arena.Node(Op::kGetRows, DType::kF32, {32, 2}, {a, idx});
  ASSERT_TRUE(Compute(dst).ok());
  for (int i = 0; i < 32; ++i) {
    EXPECT_DOUBLE_EQ(ReadElement(*dst, i, 0, 0, 0), rows[64 + i]) << i;
    EXPECT_DOUBLE_EQ(ReadElement(*dst, i, 1, 0, 0), rows[i]) << i;
  }
}

// Every quantized type goes through dequantization: MUL_MAT (one matrix per batch),
// MUL_MAT_ID (3 experts) and GET_ROWS on the quantized tensor equal the same ops on its f32
// copy.
TEST(ReferenceQuantized, OpsEqualOpsOnDequantizedCopy) {
  constexpr int64_t k = 256, m = 3, n_exp = 3;
  for (DType type : kAllDTypes) {
    if (!IsQuantized(type)) continue;
    SCOPED_TRACE(DTypeName(type));
    Arena arena;
    Tensor* q = arena.New(type, {k, m, n_exp});
    Tensor* f = arena.New(DType::kF32, {k, m, n_exp});
    std::vector<double> row(k);
    for (int64_t e = 0; e < n_exp; ++e) {
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t i = 0; i < k; ++i)
          row[i] = std::sin(0.37 * static_cast<double>(i + 7 * r + 31 * e));
        WriteRow(q, r, e, 0, row.data());
        ReadRow(*q, r, e, 0, row.data());
        WriteRow(f, r, e, 0, row.data());
      }
    }
    std::vector<float> xv(k * n_exp);
    for (size_t i = 0; i < xv.size(); ++i)
      xv[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
    Tensor* x = arena.F32({k, 1, n_exp}, xv);  // MUL_MAT: batch i meets matrix i.
    Tensor* x_tokens =                         // MUL_MAT_ID: one row per token.
        arena.F32({k, 1, 2}, std::vector<float>(xv.begin(), xv.begin() + 2 * k));
    Tensor* ids = arena.I32({2, 2}, {2, 0, 1, 2});
    Tensor* idx = arena.I32({2, 3}, {1, 2, 0, 0, 2, 1});
    auto run = [&](Tensor* w) {
      std::vector<Tensor*> out = {
          arena.Node(Op::kMulMat, DType::kF32, {m, 1, n_exp}, {w, x}),
          arena.Node(Op::kMulMatId, DType::kF32, {m, 2, 2}, {w, x_tokens, ids}),
          arena.Node(Op::kGetRows, DType::kF32, {k, 2, n_exp}, {w, idx})};
      for (Tensor* t : out) EXPECT_TRUE(Compute(t).ok()) << OpName(t->op);
      return out;
    };
    const std::vector<Tensor*> got = run(q), want = run(f);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(Nmse(*got[i], *want[i]), 0) << OpName(got[i]->op);
    }
  }
}

TEST(ReferenceMulMatId, PicksExperts) {
  Arena arena;
  // Expert e multiplies by (e + 1): as[:, :, e] = (e + 1) * I (2x2).
  Tensor* as = arena.F32({2, 2, 3}, {1, 0, 0, 1, 2, 0, 0, 2, 3, 0, 0, 3});
  Tensor* b = arena.F32({2, 1, 2}, {1, 2, 3, 4});  // one row per token, shared by the slots.
  Tensor* ids = arena.I32({2, 2}, {2, 0, 1, 1});
  Tensor* dst = arena.Node(Op::kMulMatId, DType::kF32, {2, 2, 2}, {as, b, ids});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({3, 6, 1, 2, 6, 8, 6, 8}));
}

TEST(ReferenceMulMatId, UsesRowPerSlotWhenBHasNUsedRows) {
  Arena arena;
  Tensor* as = arena.F32({1, 1, 2}, {10, 100});
  Tensor* b = arena.F32({1, 2, 1}, {1, 2});
  Tensor* ids = arena.I32({2, 1}, {1, 0});
  Tensor* dst = arena.Node(Op::kMulMatId, DType::kF32, {1, 2, 1}, {as, b, ids});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({100, 20}));
}

TEST(ReferenceMulMatId, BadIdIsInvalidArgumentAndZeros) {
  Arena arena;
  Tensor* as = arena.F32({1, 1, 2}, {10, 100});
  Tensor* b = arena.F32({1, 1, 1}, {1});
  Tensor* ids = arena.I32({2, 1}, {5, 1});
  Tensor* dst = arena.Node(Op::kMulMatId, DType::kF32, {1, 2, 1}, {as, b, ids});
  reinterpret_cast<float*>(dst->data)[0] = 42;
  const absl::Status s = Compute(dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("MUL_MAT_ID"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("5"));
  EXPECT_THAT(Values(*dst), Near({0, 100}));
}

// Expert parallelism: the weights hold experts [1, 3) of 4 (expert 1 multiplies by 2,
// expert 2 by 3); ids 0 and 3 belong to another device: zero rows, and no error.
TEST(ReferenceMulMatId, ExpertRangeComputesItsExpertsAndZerosTheRest) {
  Arena arena;
  Tensor* as = arena.F32({2, 2, 2}, {2, 0, 0, 2, 3, 0, 0, 3});
  Tensor* b = arena.F32({2, 1, 2}, {1, 2, 3, 4});
  Tensor* ids = arena.I32({2, 2}, {2, 0, 3, 1});
  Tensor* dst = arena.Node(Op::kMulMatId, DType::kF32, {2, 2, 2}, {as, b, ids});
  dst->op_params[kMulMatIdFirstExpert] = 1;
  dst->op_params[kMulMatIdExpertCount] = 2;
  for (int i = 0; i < 8; ++i) reinterpret_cast<float*>(dst->data)[i] = 42;
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({3, 6, 0, 0, 0, 0, 6, 8}));
}

TEST(ReferenceElementwise, BroadcastAddAndMul) {
  Arena arena;
  Tensor* a = arena.F32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor* b = arena.F32({2, 1, 2}, {10, 20, 30, 40});
  Tensor* add = arena.Node(Op::kAdd, DType::kF32, {2, 2, 2}, {a, b});
  Tensor* mul = arena.Node(Op::kMul, DType::kF32, {2, 2, 2}, {a, b});
  ASSERT_TRUE(Compute(add).ok());
  ASSERT_TRUE(Compute(mul).ok());
  EXPECT_THAT(Values(*add), Near({11, 22, 13, 24, 35, 46, 37, 48}));
  EXPECT_THAT(Values(*mul), Near({10, 40, 30, 80, 150, 240, 210, 320}));
}

TEST(ReferenceElementwise, ScaleSiluSwiglu) {
  Arena arena;
  Tensor* a = arena.F32({3}, {-1, 0, 2});
  Tensor* b = arena.F32({3}, {2, 3, 4});
  Tensor* scale = arena.Node(Op::kScale, DType::kF32, {3}, {a});
  scale->SetParamF32(0, 2.0f);
  scale->SetParamF32(1, 0.5f);
  Tensor* silu = arena.Node(Op::kSilu, DType::kF32, {3}, {a});
  Tensor* swiglu = arena.Node(Op::kSwiglu, DType::kF32, {3}, {a, b});
  ASSERT_TRUE(Compute(scale).ok());
  ASSERT_TRUE(Compute(silu).ok());
  ASSERT_TRUE(Compute(swiglu).ok());
  const double s_m1 = -1 / (1 + std::exp(1.0)), s_2 = 2 / (1 + std::exp(-2.0));
  EXPECT_THAT(Values(*scale), Near({-1.5, 0.5, 4.5}));
  EXPECT_THAT(Values(*silu), Near({s_m1, 0, s_2}));
  EXPECT_THAT(Values(*swiglu), Near({2 * s_m1, 0, 4 * s_2}));
}

TEST(ReferenceRmsNorm, ThreeFour) {
  Arena arena;
  Tensor* a = arena.F32({2, 2}, {3, 4, 0, 2});
  Tensor* dst = arena.Node(Op::kRmsNorm, DType::kF32, {2, 2}, {a});
  dst->SetParamF32(0, 0.0f);
  ASSERT_TRUE(Compute(dst).ok());
  // mean([9, 16]) = 12.5; mean([0, 4]) = 2.
  EXPECT_THAT(Values(*dst), Near({3 / std::sqrt(12.5), 4 / std::sqrt(12.5), 0, std::sqrt(2.0)}));
  dst->SetParamF32(0, 1.0f);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_NEAR(ReadElement(*dst, 0, 0, 0, 0), 3 / std::sqrt(13.5), kTol);
}

TEST(ReferenceSoftMax, ZeroAndLn2) {
  Arena arena;
  Tensor* a = arena.F32({2}, {0, static_cast<float>(std::numbers::ln2)});
  Tensor* dst = arena.Node(Op::kSoftMax, DType::kF32, {2}, {a});
  dst->SetParamF32(0, 1.0f);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({1.0 / 3, 2.0 / 3}));
}

TEST(ReferenceSoftMax, ScaleAndF32MaskWithInfinities) {
  Arena arena;
  Tensor* a = arena.F32({3, 2}, {1, 1, 5, 2, 2, 2});
  // Row 0 masks its last entry, row 1 masks everything.
  Tensor* mask =
      arena.F32({3, 2}, {0, static_cast<float>(std::log(2.0)), -kInf, -kInf, -kInf, -kInf});
  Tensor* dst = arena.Node(Op::kSoftMax, DType::kF32, {3, 2}, {a, mask});
  dst->SetParamF32(0, 0.5f);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({1.0 / 3, 2.0 / 3, 0, 0, 0, 0}));
}

TEST(ReferenceSoftMax, F16MaskBroadcastsOverDim2) {
  Arena arena;
  Tensor* a = arena.F32({2, 1, 2}, {0, 0, 0, 0});
  Tensor* mask = arena.New(DType::kF16, {2, 1, 1});
  auto* m = static_cast<uint16_t*>(mask->data);
  m[0] = FloatToHalf(-kInf);
  m[1] = FloatToHalf(0.0f);
  Tensor* dst = arena.Node(Op::kSoftMax, DType::kF32, {2, 1, 2}, {a, mask});
  dst->SetParamF32(0, 1.0f);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({0, 1, 0, 1}));
}

TEST(ReferenceSoftMax, MaxBiasIsUnimplemented) {
  Arena arena;
  Tensor* a = arena.F32({2}, {0, 0});
  Tensor* dst = arena.Node(Op::kSoftMax, DType::kF32, {2}, {a});
  dst->SetParamF32(0, 1.0f);
  dst->SetParamF32(1, 8.0f);
  EXPECT_EQ(Compute(dst).code(), absl::StatusCode::kUnimplemented);
}

// A ROPE node over a [head_dim, 1, 1] single-token input at position `pos`.
Tensor* RopeNode(Arena& arena, const std::vector<float>& x, int n_dims, int mode, int32_t pos) {
  const int64_t head_dim = static_cast<int64_t>(x.size());
  Tensor* a = arena.F32({head_dim, 1, 1}, x);
  Tensor* p = arena.I32({1}, {pos});
  Tensor* dst = arena.Node(Op::kRope, DType::kF32, {head_dim, 1, 1}, {a, p});
  dst->op_params[0] = n_dims;
  dst->op_params[1] = mode;
  dst->op_params[2] = 4096;
  dst->SetParamF32(3, 10000.0f);  // freq_base
  dst->SetParamF32(4, 1.0f);      // freq_scale
  dst->SetParamF32(5, 0.0f);      // ext_factor
  dst->SetParamF32(6, 1.0f);      // attn_factor
  dst->SetParamF32(7, 32.0f);     // beta_fast
  dst->SetParamF32(8, 1.0f);      // beta_slow
  return dst;
}

TEST(ReferenceRope, NormalModeUnitVectorsAtPositionOne) {
  Arena arena;
  // Pairs (0,1) and (2,3); pair 1 turns at 10000^(-2/4) = 0.01 rad per position.
  Tensor* dst = RopeNode(arena, {1, 0, 1, 0, 7, 8}, 4, 0, 1);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst),
              Near({std::cos(1.0), std::sin(1.0), std::cos(0.01), std::sin(0.01), 7, 8}));
}

TEST(ReferenceRope, NeoxModePairsHalves) {
  Arena arena;
  // Pairs (0,2) and (1,3).
  Tensor* dst = RopeNode(arena, {1, 0, 0, 1}, 4, 2, 1);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({std::cos(1.0), -std::sin(0.01), std::sin(1.0), std::cos(0.01)}));
}

TEST(ReferenceRope, FreqFactorsDivideTheAngle) {
  Arena arena;
  Tensor* dst = RopeNode(arena, {1, 0, 1, 0}, 4, 0, 3);
  Tensor* ff = arena.F32({2}, {2, 0.5});
  dst->src[2] = ff;
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({std::cos(1.5), std::sin(1.5), std::cos(0.06), std::sin(0.06)}));
}

TEST(ReferenceRope, YarnMixesAnglesAndScalesMagnitude) {
  Arena arena;
  const int n_dims = 8;
  Tensor* dst = RopeNode(arena, {1, 0, 1, 0, 1, 0, 1, 0}, n_dims, 0, 5);
  dst->op_params[2] = 64;      // n_ctx_orig
  dst->SetParamF32(4, 0.25f);  // freq_scale
  dst->SetParamF32(5, 1.0f);   // ext_factor
  dst->SetParamF32(7, 2.0f);   // beta_fast
  dst->SetParamF32(8, 1.0f);   // beta_slow
  ASSERT_TRUE(Compute(dst).ok());
  // corr_dim(beta) = 8 ln(64 / (2 pi beta)) / (2 ln 10000): 0.70697 for beta_fast = 2 and
  // 1.00800 for beta_slow = 1, so low = floor = 0 and high = ceil = 2; the ramp
  // 1 - clamp((i - 0) / 2, 0, 1) is 1, 0.5, 0, 0 for pairs 0..3.
  const double mscale = 1 + 0.1 * std::log(4.0);
  const double ramp[4] = {1, 0.5, 0, 0};
  std::vector<double> expected;
  for (int i = 0; i < 4; ++i) {
    const double extrap = 5 * std::pow(10000.0, -2.0 * i / n_dims);
    const double theta = 0.25 * extrap * (1 - ramp[i]) + extrap * ramp[i];
    expected.push_back(std::cos(theta) * mscale);
    expected.push_back(std::sin(theta) * mscale);
  }
  EXPECT_THAT(Values(*dst), Near(expected));
}

TEST(ReferenceRope, UsesPositionPerToken) {
  Arena arena;
  // [head_dim 2, 1 head, 2 tokens]: token 0 at position 0 (unchanged), token 1 at position 2.
  Tensor* a = arena.F32({2, 1, 2}, {1, 0, 1, 0});
  Tensor* pos = arena.I32({2}, {0, 2});
  Tensor* dst = arena.Node(Op::kRope, DType::kF32, {2, 1, 2}, {a, pos});
  dst->op_params[0] = 2;
  dst->SetParamF32(3, 10000.0f);
  dst->SetParamF32(4, 1.0f);
  dst->SetParamF32(6, 1.0f);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({1, 0, std::cos(2.0), std::sin(2.0)}));
}

TEST(ReferenceRope, UnknownModeIsUnimplemented) {
  Arena arena;
  Tensor* dst = RopeNode(arena, {1, 0}, 2, 8, 1);
  EXPECT_EQ(Compute(dst).code(), absl::StatusCode::kUnimplemented);
}

TEST(ReferenceGetRows, PicksRowsFromF16) {
  Arena arena;
  Tensor* a = arena.New(DType::kF16, {2, 3});
  auto* h = static_cast<uint16_t*>(a->data);
  for (int i = 0; i < 6; ++i) h[i] = FloatToHalf(static_cast<float>(i + 1));
  Tensor* idx = arena.I32({3}, {2, 0, 2});
  Tensor* dst = arena.Node(Op::kGetRows, DType::kF32, {2, 3}, {a, idx});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({5, 6, 1, 2, 5, 6}));
}

TEST(ReferenceGetRows, IndexesPerBatch) {
  Arena arena;
  Tensor* a = arena.F32({1, 2, 2}, {1, 2, 3, 4});
  Tensor* idx = arena.I32({1, 2}, {1, 0});  // batch 0 row 1, batch 1 row 0.
  Tensor* dst = arena.Node(Op::kGetRows, DType::kF32, {1, 1, 2}, {a, idx});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({2, 3}));
}

TEST(ReferenceGetRows, OutOfRangeIsInvalidArgumentAndZeros) {
  Arena arena;
  Tensor* a = arena.F32({2, 2}, {1, 2, 3, 4});
  Tensor* idx = arena.I32({2}, {1, -1});
  Tensor* dst = arena.Node(Op::kGetRows, DType::kF32, {2, 2}, {a, idx});
  std::vector<double> junk = {9, 9};
  WriteRow(dst, 1, 0, 0, junk.data());
  const absl::Status s = Compute(dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("GET_ROWS"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("-1"));
  EXPECT_THAT(Values(*dst), Near({3, 4, 0, 0}));
}

TEST(ReferenceSetRows, WritesF16RowsAndSkipsBadIndex) {
  Arena arena;
  Tensor* a = arena.New(DType::kF16, {2, 3});
  Tensor* b = arena.F32({2, 2}, {1.5f, -2, 3, 4});
  Tensor* idx = arena.I32({2}, {2, 0});
  Tensor* dst = arena.Alias(Op::kSetRows, a, {a, b, idx});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*a), Near({3, 4, 0, 0, 1.5, -2}));

  reinterpret_cast<int32_t*>(idx->data)[0] = 3;
  const absl::Status s = Compute(dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("SET_ROWS"));
}

TEST(ReferenceSetRows, BroadcastsIndicesOverDim2) {
  Arena arena;
  Tensor* a = arena.New(DType::kF32, {1, 2, 2});
  Tensor* b = arena.F32({1, 1, 2}, {7, 8});
  Tensor* idx = arena.I32({1, 1}, {1});  // c1 = 1: the same row index for both batches.
  Tensor* dst = arena.Alias(Op::kSetRows, a, {a, b, idx});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*a), Near({0, 7, 0, 8}));
}

TEST(ReferenceSetRows, QuantizesQ8_0Rows) {
  Arena arena;
  Tensor* a = arena.New(DType::kQ8_0, {32, 2});
  std::vector<float> row(32);
  for (int i = 0; i < 32; ++i) row[i] = static_cast<float>(i - 16) / 8;
  Tensor* b = arena.F32({32, 1}, row);
  Tensor* idx = arena.I32({1}, {1});
  Tensor* dst = arena.Alias(Op::kSetRows, a, {a, b, idx});
  ASSERT_TRUE(Compute(dst).ok());
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(ReadElement(*a, i, 1, 0, 0), row[i], 2.0 / 127) << i;
    EXPECT_EQ(ReadElement(*a, i, 0, 0, 0), 0) << i;
  }
}

TEST(ReferenceCpy, F32ToF16ToF32) {
  Arena arena;
  Tensor* a = arena.F32({3}, {1.0f, 1.0f / 3, 65504.0f});
  Tensor* h = arena.New(DType::kF16, {3});
  Tensor* back = arena.New(DType::kF32, {3});
  ASSERT_TRUE(Compute(arena.Alias(Op::kCpy, h, {a, h})).ok());
  ASSERT_TRUE(Compute(arena.Alias(Op::kCpy, back, {h, back})).ok());
  EXPECT_EQ(static_cast<uint16_t*>(h->data)[1], FloatToHalf(1.0f / 3));
  EXPECT_THAT(Values(*back), ElementsAre(1.0, HalfToFloat(FloatToHalf(1.0f / 3)), 65504.0));
}

TEST(ReferenceCpy, FlatOrderAcrossShapes) {
  Arena arena;
  Tensor* a = arena.F32({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor* b = arena.New(DType::kBF16, {2, 3});
  ASSERT_TRUE(Compute(arena.Alias(Op::kCpy, b, {a, b})).ok());
  EXPECT_THAT(Values(*b), Near({1, 2, 3, 4, 5, 6}));
  EXPECT_DOUBLE_EQ(ReadElement(*b, 0, 2, 0, 0), 5);
}

TEST(ReferenceCpy, Q8_0RoundTripAndSameTypeCopyIsExact) {
  Arena arena;
  std::vector<float> values(64);
  for (int i = 0; i < 64; ++i) values[i] = std::sin(static_cast<float>(i));
  Tensor* a = arena.F32({32, 2}, values);
  Tensor* q = arena.New(DType::kQ8_0, {32, 2});
  Tensor* q2 = arena.New(DType::kQ8_0, {32, 2});
  ASSERT_TRUE(Compute(arena.Alias(Op::kCpy, q, {a, q})).ok());
  ASSERT_TRUE(Compute(arena.Alias(Op::kCpy, q2, {q, q2})).ok());
  EXPECT_EQ(std::memcmp(q->data, q2->data, q->NumBytes()), 0);
  EXPECT_LT(Nmse(*q, *a), 1e-4);
}

TEST(ReferenceCpy, QuantizedWithDifferentRowLengthIsUnimplemented) {
  Arena arena;
  Tensor* a = arena.F32({64}, std::vector<float>(64, 1.0f));
  Tensor* q = arena.New(DType::kQ8_0, {32, 2});
  EXPECT_EQ(Compute(arena.Alias(Op::kCpy, q, {a, q})).code(), absl::StatusCode::kUnimplemented);
}

// The view ggml_permute makes: axis i of a becomes axis ax[i] of the result.
Tensor* PermuteView(Arena& arena, Tensor* a, int ax0, int ax1, int ax2, int ax3) {
  Tensor* v = arena.Alias(Op::kPermute, a, {a});
  const int ax[4] = {ax0, ax1, ax2, ax3};
  for (int i = 0; i < 4; ++i) {
    v->ne[ax[i]] = a->ne[i];
    v->nb[ax[i]] = a->nb[i];
    v->op_params[i] = ax[i];
  }
  return v;
}

TEST(ReferencePermute, ReadElementFollowsStrides) {
  Arena arena;
  // a[i0, i1, i2] = 100 * i2 + 10 * i1 + i0, shape [2, 3, 4].
  std::vector<float> values;
  for (int i2 = 0; i2 < 4; ++i2) {
    for (int i1 = 0; i1 < 3; ++i1) {
      for (int i0 = 0; i0 < 2; ++i0) values.push_back(100 * i2 + 10 * i1 + i0);
    }
  }
  Tensor* a = arena.F32({2, 3, 4}, values);
  Tensor* p = PermuteView(arena, a, 2, 0, 1, 3);  // result [3, 4, 2]: p[i1, i2, i0] = a[i0..].
  ASSERT_TRUE(Compute(p).ok());                   // a view: nothing to do.
  EXPECT_EQ(p->ne[0], 3);
  EXPECT_EQ(p->ne[1], 4);
  EXPECT_EQ(p->ne[2], 2);
  EXPECT_DOUBLE_EQ(ReadElement(*p, 2, 3, 1, 0), 321);
  EXPECT_DOUBLE_EQ(ReadElement(*p, 1, 0, 1, 0), 11);

  Tensor* cont = arena.Node(Op::kCont, DType::kF32, {3, 4, 2}, {p});
  ASSERT_TRUE(Compute(cont).ok());
  const float* c = static_cast<const float*>(cont->data);
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 10);   // dim 0 of the result is a's dim 1.
  EXPECT_EQ(c[3], 100);  // dim 1 of the result is a's dim 2.
  EXPECT_EQ(c[12], 1);   // dim 2 of the result is a's dim 0.
}

TEST(ReferenceTranspose, MatMulReadsTransposedView) {
  Arena arena;
  Tensor* at = arena.F32({2, 3}, {1, 4, 2, 5, 3, 6});  // transpose of the [3, 2] matrix a.
  Tensor* a = PermuteView(arena, at, 1, 0, 2, 3);
  a->op = Op::kTranspose;
  Tensor* b = arena.F32({3, 1}, {1, 1, 1});
  Tensor* dst = arena.Node(Op::kMulMat, DType::kF32, {2, 1}, {a, b});
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({6, 15}));
}

// FLASH_ATTN over q [D, n_q, H, 1], k/v [D, n_kv, H_kv, 1] given as F32 values.
TEST(ReferenceFlashAttn, SingleKeyPassesValueThrough) {
  Arena arena;
  Tensor* q = arena.F32({2, 1, 1}, {0.3f, -0.7f});
  Tensor* k = arena.F32({2, 1, 1}, {5, 6});
  Tensor* v = arena.F32({3, 1, 1}, {1, 2, 3});
  Tensor* dst = arena.Node(Op::kFlashAttn, DType::kF32, {3, 1, 1}, {q, k, v});
  dst->SetParamF32(0, 0.125f);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({1, 2, 3}));
}

TEST(ReferenceFlashAttn, WeightsKeysBySoftmaxOfScaledDots) {
  Arena arena;
  Tensor* q = arena.F32({1, 1, 1}, {1});
  Tensor* k = arena.F32({1, 2, 1}, {0, static_cast<float>(std::numbers::ln2)});
  Tensor* v = arena.F32({1, 2, 1}, {3, 6});
  Tensor* dst = arena.Node(Op::kFlashAttn, DType::kF32, {1, 1, 1}, {q, k, v});
  dst->SetParamF32(0, 1.0f);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_NEAR(ReadElement(*dst, 0, 0, 0, 0), 3.0 / 3 + 6.0 * 2 / 3, kTol);  // weights 1/3, 2/3.
}

TEST(ReferenceFlashAttn, GqaF16KvMaskAndLayout) {
  Arena arena;
  // 2 query heads share 1 KV head; 2 query positions; position 0 sees only key 0, position 1
  // only key 1 (a causal-style mask); the last query row is fully masked in a second run.
  Tensor* q = arena.F32({1, 2, 2}, {1, 1, 1, 1});
  Tensor* k = arena.New(DType::kF16, {1, 2, 1});
  Tensor* v = arena.New(DType::kF16, {2, 2, 1});
  auto* kh = static_cast<uint16_t*>(k->data);
  auto* vh = static_cast<uint16_t*>(v->data);
  kh[0] = FloatToHalf(1);
  kh[1] = FloatToHalf(2);
  const float v_values[4] = {10, 11, 20, 21};
  for (int i = 0; i < 4; ++i) vh[i] = FloatToHalf(v_values[i]);
  Tensor* mask = arena.New(DType::kF16, {2, 2});
  auto* mh = static_cast<uint16_t*>(mask->data);
  mh[0] = FloatToHalf(0);
  mh[1] = FloatToHalf(-kInf);
  mh[2] = FloatToHalf(-kInf);
  mh[3] = FloatToHalf(0);
  // Result [Dv, H, n_q]: heads before positions.
  Tensor* dst = arena.Node(Op::kFlashAttn, DType::kF32, {2, 2, 2}, {q, k, v, mask});
  dst->SetParamF32(0, 1.0f);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({10, 11, 10, 11, 20, 21, 20, 21}));

  mh[3] = FloatToHalf(-kInf);
  ASSERT_TRUE(Compute(dst).ok());
  EXPECT_THAT(Values(*dst), Near({10, 11, 10, 11, 0, 0, 0, 0}));
}

TEST(ReferenceFlashAttn, SoftcapIsUnimplemented) {
  Arena arena;
  Tensor* q = arena.F32({1, 1, 1}, {1});
  Tensor* dst = arena.Node(Op::kFlashAttn, DType::kF32, {1, 1, 1}, {q, q, q});
  dst->SetParamF32(2, 30.0f);
  EXPECT_EQ(Compute(dst).code(), absl::StatusCode::kUnimplemented);
}

TEST(ReferenceIo, ReadElementDequantizesBlocks) {
  Arena arena;
  Tensor* q = arena.New(DType::kQ4_0, {64});
  std::vector<double> row(64);
  for (int i = 0; i < 64; ++i) row[i] = i < 32 ? -8 : 4;  // exactly representable: d = 1, 0.5.
  WriteRow(q, 0, 0, 0, row.data());
  EXPECT_DOUBLE_EQ(ReadElement(*q, 3, 0, 0, 0), -8);
  EXPECT_DOUBLE_EQ(ReadElement(*q, 40, 0, 0, 0), 4);
}

TEST(ReferenceIo, NmseDefinition) {
  Arena arena;
  Tensor* e = arena.F32({2}, {3, 4});
  Tensor* a = arena.F32({2}, {3, 5});
  Tensor* zero = arena.F32({2}, {0, 0});
  Tensor* other_shape = arena.F32({1, 2}, {3, 4});
  EXPECT_DOUBLE_EQ(Nmse(*a, *e), 1.0 / 25);
  EXPECT_EQ(Nmse(*e, *e), 0);
  EXPECT_EQ(Nmse(*zero, *zero), 0);
  EXPECT_TRUE(std::isinf(Nmse(*a, *zero)));
  EXPECT_TRUE(std::isinf(Nmse(*other_shape, *e)));
}

TEST(ReferenceIo, ViewOpsDoNothing) {
  Arena arena;
  Tensor* a = arena.F32({2}, {1, 2});
  for (Op op : {Op::kNone, Op::kView, Op::kReshape, Op::kPermute, Op::kTranspose}) {
    EXPECT_TRUE(Compute(arena.Alias(op, a, {a})).ok());
  }
  EXPECT_THAT(Values(*a), Near({1, 2}));
  Tensor* bad = arena.Node(Op::kCount, DType::kF32, {1}, {});
  EXPECT_EQ(Compute(bad).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tg::ref
