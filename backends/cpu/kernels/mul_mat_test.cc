// Tests of the CPU MUL_MAT / MUL_MAT_ID kernels against a naive double-precision reference,
// for every weight type, odd shapes, broadcasting, strided views and 1-4 threads. The
// reference rounds the activations through the weight type's activation format (Q8_0 for
// Q4_0/Q8_0, Q8_K for the k-quants) so that only the kernels' arithmetic is compared.
// Also checks the SIMD kernels against the scalar ones and the activation quantizers
// against the reference quantizers (bit-exact).
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/compute_params.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/quantize_act.h"
#include "backends/cpu/kernels/vec_dot.h"
#include "core/fp16.h"
#include "core/quants.h"
#include "gtest/gtest.h"
#include "tests/lib/mul_mat_runner.h"
#include "tests/lib/test_util.h"

namespace tg::cpu {
namespace {

using ::tg::testing::Nmse;
using ::tg::testing::RandomFloats;
using ::tg::testing::RunMulMat;
using ::tg::testing::RunMulMatKernel;

constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16,  DType::kQ8_0,
                                  DType::kQ4_0, DType::kQ4_K,   DType::kQ6_K,  DType::kQ5_0,
                                  DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4, DType::kQ5_K,
                                  DType::kQ3_K, DType::kQ2_K,   DType::kIQ4_XS};

// Float weight types keep f32 accuracy; quantized results add per-block f32 rounding.
double Tolerance(DType type) { return IsQuantized(type) ? 1e-9 : 1e-10; }

// A hand-built tensor and the bytes it points at.
struct Owned {
  Tensor t;
  std::vector<uint8_t> bytes;
};

Owned Contiguous(DType type, std::array<int64_t, 4> ne) {
  Owned o;
  o.t.type = type;
  std::copy(ne.begin(), ne.end(), o.t.ne);
  SetContiguousStrides(&o.t);
  o.bytes.resize(o.t.nb[3] * ne[3]);
  o.t.data = o.bytes.data();
  return o;
}

// Weights [k, m, n2, n3] of `type` from random floats; rows `row_pad` bytes apart beyond
// their size, as in a view of a larger cache.
Owned MakeWeights(DType type, int64_t k, int64_t m, int64_t n2, int64_t n3, uint32_t seed,
                  size_t row_pad = 0) {
  Owned o;
  o.t.type = type;
  o.t.ne[0] = k, o.t.ne[1] = m, o.t.ne[2] = n2, o.t.ne[3] = n3;
  o.t.nb[0] = BlockBytes(type);
  o.t.nb[1] = RowBytes(type, k) + row_pad;
  o.t.nb[2] = o.t.nb[1] * m;
  o.t.nb[3] = o.t.nb[2] * n2;
  o.bytes.resize(o.t.nb[3] * n3);
  o.t.data = o.bytes.data();
  const std::vector<float> v = RandomFloats(k * m * n2 * n3, seed);
  for (int64_t r = 0; r < m * n2 * n3; ++r) {
    QuantizeRow(type, v.data() + r * k, o.bytes.data() + r * o.t.nb[1], k);
  }
  return o;
}

enum class Layout { kContiguous, kTransposed, kPermuted12 };

// f32 activations [k, n, n2, n3] stored in `layout`: contiguous, with dims 0 and 1 swapped in
// memory (nb[0] != 4), or with dims 1 and 2 swapped (rows contiguous, strided between).
Owned MakeActivations(int64_t k, int64_t n, int64_t n2, int64_t n3, Layout layout, uint32_t seed) {
  Owned o;
  o.t.type = DType::kF32;
  o.t.ne[0] = k, o.t.ne[1] = n, o.t.ne[2] = n2, o.t.ne[3] = n3;
  const size_t f = sizeof(float);
  switch (layout) {
    case Layout::kContiguous:
      SetContiguousStrides(&o.t);
      break;
    case Layout::kTransposed:
      o.t.nb[1] = f, o.t.nb[0] = n * f, o.t.nb[2] = k * n * f, o.t.nb[3] = k * n * n2 * f;
      break;
    case Layout::kPermuted12:
      o.t.nb[0] = f, o.t.nb[2] = k * f, o.t.nb[1] = k * n2 * f, o.t.nb[3] = k * n * n2 * f;
      break;
  }
  o.bytes.resize(k * n * n2 * n3 * f);
  o.t.data = o.bytes.data();
  const std::vector<float> v = RandomFloats(k * n * n2 * n3, seed);
  std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
  return o;
}

const float& At(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return *reinterpret_cast<const float*>(static_cast<const char*>(t.data) + i0 * t.nb[0] +
                                         i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]);
}

// Activation row as the kernels see it: rounded through the weight type's activation format.
std::vector<double> ActivationRow(DType weight_type, const Tensor& b, int64_t i1, int64_t i2,
                                  int64_t i3) {
  const int64_t k = b.ne[0];
  std::vector<float> x(k), y(k);
  for (int64_t i = 0; i < k; ++i) x[i] = At(b, i, i1, i2, i3);
  if (IsQuantized(weight_type) && BlockSize(weight_type) == kQK8_0) {
    std::vector<BlockQ8_0> q(k / kQK8_0);
    QuantizeRowQ8_0(x.data(), q.data(), k);
    DequantizeRowQ8_0(q.data(), y.data(), k);
  } else if (IsQuantized(weight_type) && BlockSize(weight_type) == kQK_K) {
    std::vector<BlockQ8_K> q(k / kQK_K);
    QuantizeRowQ8_K(x.data(), q.data(), k);
    DequantizeRowQ8_K(q.data(), y.data(), k);
  } else {
    y = x;
  }
  return std::vector<double>(y.begin(), y.end());
}

std::vector<double> WeightRow(const Tensor& a, int64_t i1, int64_t i2, int64_t i3) {
  std::vector<float> w(a.ne[0]);
  DequantizeRow(a.type,
                static_cast<const char*>(a.data) + i1 * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3],
                w.data(), a.ne[0]);
  return std::vector<double>(w.begin(), w.end());
}

double Dot(const std::vector<double>& x, const std::vector<double>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

// Reference MUL_MAT, in dst's logical order [m, n, i2, i3].
std::vector<double> ReferenceMulMat(const Tensor& a, const Tensor& b) {
  const int64_t m = a.ne[1], n = b.ne[1];
  const int64_t r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
  std::vector<double> out;
  out.reserve(m * n * b.ne[2] * b.ne[3]);
  for (int64_t i3 = 0; i3 < b.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < b.ne[2]; ++i2) {
      std::vector<std::vector<double>> w(m);
      for (int64_t r = 0; r < m; ++r) w[r] = WeightRow(a, r, i2 / r2, i3 / r3);
      for (int64_t c = 0; c < n; ++c) {
        const std::vector<double> y = ActivationRow(a.type, b, c, i2, i3);
        for (int64_t r = 0; r < m; ++r) out.push_back(Dot(w[r], y));
      }
    }
  }
  return out;
}

// K values per type: one block, and an odd number of them.
std::vector<int64_t> TestKs(DType type) {
  if (BlockSize(type) == kQK_K) return {256, 768};
  if (BlockSize(type) == kQK4_0) return {32, 544};
  return {1, 45, 544};
}

std::string Describe(DType type, int64_t k, int64_t m, int64_t n, int nth) {
  return std::string(DTypeName(type)) + " K=" + std::to_string(k) + " M=" + std::to_string(m) +
         " N=" + std::to_string(n) + " threads=" + std::to_string(nth);
}

class MulMatTypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(MulMatTypeTest, OddShapesAndThreadCounts) {
  const DType type = GetParam();
  int run = 0;
  for (int64_t k : TestKs(type)) {
    for (int64_t m : {1, 3, 17, 67}) {
      for (int64_t n : {1, 2, 7, 33, 67}) {
        const int nth = 1 + run % 4;
        Owned a = MakeWeights(type, k, m, 1, 1, 100 + run);
        Owned b = MakeActivations(k, n, 1, 1, Layout::kContiguous, 200 + run);
        const std::vector<float> got = RunMulMat(&a.t, &b.t, nth);
        EXPECT_LT(Nmse(got, ReferenceMulMat(a.t, b.t)), Tolerance(type))
            << Describe(type, k, m, n, nth);
        ++run;
      }
    }
  }
}

TEST_P(MulMatTypeTest, BroadcastAndStridedViews) {
  const DType type = GetParam();
  const int64_t k =
      BlockSize(type) == 1 ? 96 : 2 * BlockSize(type) * (type == DType::kQ4_0 ? 9 : 1);
  int run = 0;
  for (Layout layout : {Layout::kContiguous, Layout::kTransposed, Layout::kPermuted12}) {
    for (int64_t n : {1, 5, 40}) {
      const int nth = 1 + run % 4;
      // a [k, 37, 2, 1] broadcast over b [k, n, 4, 3]; a's rows padded as in a cache view.
      Owned a = MakeWeights(type, k, 37, 2, 1, 300 + run, 2 * BlockBytes(type));
      Owned b = MakeActivations(k, n, 4, 3, layout, 400 + run);
      const std::vector<float> got = RunMulMat(&a.t, &b.t, nth);
      EXPECT_LT(Nmse(got, ReferenceMulMat(a.t, b.t)), Tolerance(type))
          << Describe(type, k, 37, n, nth) << " layout " << static_cast<int>(layout);
      ++run;
    }
  }
}

TEST_P(MulMatTypeTest, ScalarFallbackMatchesReference) {
  const DType type = GetParam();
  ForceScalarDotKernelsForTesting(true);
  for (int64_t n : {1, 6, 35}) {
    const int64_t k = TestKs(type).back();
    Owned a = MakeWeights(type, k, 19, 2, 1, 500 + n);
    Owned b = MakeActivations(k, n, 2, 1, Layout::kPermuted12, 600 + n);
    const std::vector<float> got = RunMulMat(&a.t, &b.t, 3);
    EXPECT_LT(Nmse(got, ReferenceMulMat(a.t, b.t)), Tolerance(type)) << Describe(type, k, 19, n, 3);
  }
  ForceScalarDotKernelsForTesting(false);
}

// SIMD and scalar kernels on the same random data: each converts activations its own way and
// runs its own tile kernel; both must give the same numbers up to f32 rounding.
TEST_P(MulMatTypeTest, SimdMatchesScalarKernels) {
  const DType type = GetParam();
  const DotKernels& simd = GetDotKernels(type);
  const DotKernels& portable = scalar::GetDotKernels(type);
  for (int64_t k : TestKs(type)) {
    constexpr int kRows = kMaxTileRows, kCols = kMaxTileCols;
    Owned a = MakeWeights(type, k, kRows, 1, 1, 700 + k);
    const std::vector<float> x = RandomFloats(k * kCols, 800 + k);
    std::vector<double> want(kRows * kCols);
    std::vector<float> got(kRows * kCols), ref(kRows * kCols);
    // The SIMD run is told of rows after its own that do not exist: prefetching them must not
    // fault.
    auto run = [&](const DotKernels& kern, int ahead_rows, std::vector<float>* out) {
      const size_t stride = kern.act_row_bytes(k);
      std::vector<uint8_t> act(stride * kCols + 64);
      char* base =
          reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(act.data()) + 63) / 64 * 64);
      const void* b[kCols];
      float* c[kCols];
      for (int j = 0; j < kCols; ++j) {
        if (kern.from_f32 != nullptr) {
          kern.from_f32(x.data() + j * k, base + j * stride, k);
          b[j] = base + j * stride;
        } else {
          b[j] = x.data() + j * k;
        }
        c[j] = out->data() + j * kRows;
      }
      kern.tile(k, a.t.data, a.t.nb[1], kRows, ahead_rows, b, kCols, c);
    };
    run(simd, 4 * kRows, &got);
    run(portable, 0, &ref);
    std::vector<double> ref_d(ref.begin(), ref.end());
    EXPECT_LT(Nmse(got, ref_d), Tolerance(type))
        << DTypeName(type) << " K=" << k << " isa " << DotKernelsIsa();
  }
}

// Every column count of a decode (1 to 16 activation rows, which the tile kernels take in
// passes of up to kMaxTileCols), with rows streamed one at a time (weights from memory) and in
// cached tiles of several rows: each pass of columns shares one unpacking of the weights.
TEST_P(MulMatTypeTest, DecodeColumnCountsMatchReference) {
  const DType type = GetParam();
  const int64_t k = TestKs(type).back();
  // Fewer rows than the packed GEMMs take, so every column count goes through the tiles.
  constexpr int64_t kRows = 19;
  int run = 0;
  for (bool from_memory : {true, false}) {
    for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 16}) {
      const int nth = 1 + run % 2;
      Owned a = MakeWeights(type, k, kRows, 1, 1, 900 + run);
      Owned b = MakeActivations(k, n, 1, 1, Layout::kContiguous, 1000 + run);
      const std::vector<float> got = RunMulMat(&a.t, &b.t, nth, from_memory);
      EXPECT_LT(Nmse(got, ReferenceMulMat(a.t, b.t)), Tolerance(type))
          << Describe(type, k, kRows, n, nth) << " weights from memory " << from_memory;
      ++run;
    }
  }
}

// Batch invariance of the decode kernels: a column's results are bit-identical whatever the
// other columns of its tile (a sequence decoded with 1..15 others gives the bits it gives
// alone). Float weights at a row length the row kernel takes and at one the tiles take.
TEST_P(MulMatTypeTest, DecodeColumnsAreBitIdenticalToOneColumn) {
  const DType type = GetParam();
  const std::vector<int64_t> ks = IsQuantized(type) ? std::vector<int64_t>{TestKs(type).back()}
                                                    : std::vector<int64_t>{45, 2100};
  constexpr int64_t kRows = 21;
  for (int64_t k : ks) {
    for (bool from_memory : {true, false}) {
      for (int64_t n : {2, 5, 8, 11, 16}) {
        Owned a = MakeWeights(type, k, kRows, 1, 1, 1100 + n);
        Owned b = MakeActivations(k, n, 1, 1, Layout::kContiguous, 1200 + n);
        const std::vector<float> batch = RunMulMat(&a.t, &b.t, 2, from_memory);
        for (int64_t j = 0; j < n; ++j) {
          Owned one = MakeActivations(k, 1, 1, 1, Layout::kContiguous, 0);
          std::memcpy(one.bytes.data(), b.bytes.data() + j * b.t.nb[1], k * sizeof(float));
          const std::vector<float> alone = RunMulMat(&a.t, &one.t, 1, from_memory);
          for (int64_t r = 0; r < kRows; ++r) {
            ASSERT_EQ(std::memcmp(&batch[j * kRows + r], &alone[r], sizeof(float)), 0)
                << Describe(type, k, kRows, n, 2) << " column " << j << " row " << r << ": "
                << batch[j * kRows + r] << " batched, " << alone[r] << " alone";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MulMatTypeTest, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// Shapes that cross every cache block of the packed GEMM (K, M and N blocks) with edges.
TEST(MulMatGemmTest, LargeShapesCrossCacheBlocks) {
  for (DType type : {DType::kF32, DType::kF16}) {
    Owned a = MakeWeights(type, 400, 390, 1, 1, 900);
    Owned b = MakeActivations(400, 1543, 1, 1, Layout::kContiguous, 901);
    const std::vector<float> got = RunMulMat(&a.t, &b.t, 2);
    EXPECT_LT(Nmse(got, ReferenceMulMat(a.t, b.t)), Tolerance(type)) << DTypeName(type);
  }
}

TEST(QuantizeActTest, Q8_0MatchesReferenceBitExact) {
  std::vector<float> x = RandomFloats(kQK8_0 * 64, 1000);
  // A block whose scaled values land exactly on halves (d = 1): roundf must round away.
  for (int j = 0; j < kQK8_0; ++j) x[j] = (j == 0) ? 127.0f : (j % 2 ? 2.5f : -3.5f) + j % 7;
  std::fill(x.begin() + kQK8_0, x.begin() + 2 * kQK8_0, 0.0f);  // an all-zero block.
  std::vector<BlockQ8_0> ref(64);
  QuantizeRowQ8_0(x.data(), ref.data(), x.size());
  for (int b = 0; b < 64; ++b) {
    int8_t qs[kQK8_0];
    const float d = QuantizeBlockQ8_0(x.data() + b * kQK8_0, qs);
    EXPECT_EQ(d, HalfToFloat(ref[b].d)) << "block " << b;
    EXPECT_EQ(0, std::memcmp(qs, ref[b].qs, kQK8_0)) << "block " << b;
  }
}

TEST(QuantizeActTest, Q8_KMatchesReferenceBitExact) {
  std::vector<float> x = RandomFloats(kQK_K * 8, 1100);
  x[kQK_K + 5] = 3.0f, x[kQK_K + 9] = -3.0f;  // the first largest magnitude sets the sign.
  std::fill(x.begin() + 2 * kQK_K, x.begin() + 3 * kQK_K, 0.0f);
  std::vector<BlockQ8_K> ref(8);
  QuantizeRowQ8_K(x.data(), ref.data(), x.size());
  for (int b = 0; b < 8; ++b) {
    int8_t qs[kQK_K];
    const float d = QuantizeBlockQ8_K(x.data() + b * kQK_K, qs);
    EXPECT_EQ(d, ref[b].d) << "block " << b;
    EXPECT_EQ(0, std::memcmp(qs, ref[b].qs, kQK_K)) << "block " << b;
  }
}

// ---------------------------------------------------------------------------------------------
// MUL_MAT_ID

struct MulMatIdCase {
  Owned experts, b, ids, dst;
};

MulMatIdCase MakeIdCase(DType type, int64_t k, int64_t m, int64_t n_experts, int64_t n_used,
                        int64_t b_rows, int64_t tokens, uint32_t seed) {
  MulMatIdCase c;
  c.experts = MakeWeights(type, k, m, n_experts, 1, seed);
  c.b = MakeActivations(k, b_rows, tokens, 1, Layout::kContiguous, seed + 1);
  c.ids = Contiguous(DType::kI32, {n_used, tokens, 1, 1});
  std::mt19937 rng(seed + 2);
  int32_t* ids = reinterpret_cast<int32_t*>(c.ids.bytes.data());
  for (int64_t i = 0; i < n_used * tokens; ++i) ids[i] = static_cast<int32_t>(rng() % n_experts);
  c.dst = Contiguous(DType::kF32, {m, n_used, tokens, 1});
  c.dst.t.op = Op::kMulMatId;
  c.dst.t.src[0] = &c.experts.t;
  c.dst.t.src[1] = &c.b.t;
  c.dst.t.src[2] = &c.ids.t;
  return c;
}

// Reference output for slot (i, t); zeros for an invalid expert id (or, with an expert
// range, one outside it).
std::vector<double> ReferenceSlot(const MulMatIdCase& c, int64_t i, int64_t t) {
  const int64_t m = c.experts.t.ne[1], n_experts = c.experts.t.ne[2];
  const int32_t e = reinterpret_cast<const int32_t*>(c.ids.bytes.data())[i + t * c.ids.t.ne[0]] -
                    c.dst.t.op_params[kMulMatIdFirstExpert];
  std::vector<double> out(m, 0.0);
  if (e < 0 || e >= n_experts) return out;
  const std::vector<double> y = ActivationRow(c.experts.t.type, c.b.t, i % c.b.t.ne[1], t, 0);
  for (int64_t r = 0; r < m; ++r) out[r] = Dot(WeightRow(c.experts.t, r, e, 0), y);
  return out;
}

std::vector<double> ReferenceMulMatId(const MulMatIdCase& c) {
  std::vector<double> out;
  for (int64_t t = 0; t < c.ids.t.ne[1]; ++t) {
    for (int64_t i = 0; i < c.ids.t.ne[0]; ++i) {
      const std::vector<double> s = ReferenceSlot(c, i, t);
      out.insert(out.end(), s.begin(), s.end());
    }
  }
  return out;
}

std::vector<float> Output(const MulMatIdCase& c) {
  const float* f = reinterpret_cast<const float*>(c.dst.bytes.data());
  return std::vector<float>(f, f + c.dst.bytes.size() / sizeof(float));
}

class MulMatIdTypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(MulMatIdTypeTest, MatchesReference) {
  const DType type = GetParam();
  const int64_t k = BlockSize(type) == 1 ? 64 : 2 * BlockSize(type);
  int run = 0;
  for (int64_t b_rows : {int64_t{1}, int64_t{3}}) {
    // 40 tokens: 24 slots per expert, a prefill (the packed GEMM where the build has it).
    for (int64_t tokens : {1, 9, 40}) {
      for (bool from_memory : {false, true}) {  // tiles of rows, or one row at a time.
        const int nth = 1 + run % 4;
        MulMatIdCase c = MakeIdCase(type, k, 21, 5, 3, b_rows, tokens, 1200 + run);
        KernelError error;
        RunMulMatKernel(&c.dst.t, nth, &error, from_memory);
        EXPECT_FALSE(error.set.load()) << error.message;
        EXPECT_LT(Nmse(Output(c), ReferenceMulMatId(c)), Tolerance(type))
            << Describe(type, k, 21, tokens, nth) << " b_rows " << b_rows << " weights from memory "
            << from_memory;
        ++run;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MulMatIdTypeTest, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(MulMatIdTest, OutOfRangeIdFailsAndWritesZeros) {
  for (int nth : {1, 3}) {
    MulMatIdCase c = MakeIdCase(DType::kQ4_0, 64, 10, 4, 2, 2, 5, 1300);
    int32_t* ids = reinterpret_cast<int32_t*>(c.ids.bytes.data());
    ids[3] = 4;  // == n_experts.
    ids[6] = -1;
    std::fill(reinterpret_cast<float*>(c.dst.bytes.data()),
              reinterpret_cast<float*>(c.dst.bytes.data() + c.dst.bytes.size()), NAN);
    KernelError error;
    RunMulMatKernel(&c.dst.t, nth, &error);
    ASSERT_TRUE(error.set.load());
    EXPECT_STREQ(error.message, "MUL_MAT_ID: expert id 4 out of range [0, 4)");
    const std::vector<float> got = Output(c);
    for (int slot : {3, 6}) {
      for (int r = 0; r < 10; ++r) EXPECT_EQ(got[slot * 10 + r], 0.0f) << "slot " << slot;
    }
    EXPECT_LT(Nmse(got, ReferenceMulMatId(c)), Tolerance(DType::kQ4_0));
  }
}

// Expert parallelism: this device holds experts [first, first + 2) of 7; the ids pick among
// all 7, so the other rows must be zeros (not stale memory) and nothing fails.
TEST(MulMatIdTest, ExpertRangeComputesItsExpertsAndZerosTheRest) {
  for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_K}) {
    for (int nth : {1, 3}) {
      for (int32_t first : {0, 3, 5}) {
        for (int64_t tokens : {6, 60}) {  // 60: a prefill (the packed GEMM where built).
          const int64_t k = BlockSize(type) == 1 ? 40 : BlockSize(type);
          MulMatIdCase c = MakeIdCase(type, k, 9, 2, 3, 1, tokens, 1400 + first);
          c.dst.t.op_params[kMulMatIdFirstExpert] = first;
          c.dst.t.op_params[kMulMatIdExpertCount] = 2;
          std::mt19937 rng(1500 + first);
          int32_t* ids = reinterpret_cast<int32_t*>(c.ids.bytes.data());
          int in_range = 0;
          for (int64_t i = 0; i < 3 * tokens; ++i) {
            ids[i] = static_cast<int32_t>(rng() % 7);
            in_range += ids[i] >= first && ids[i] < first + 2;
          }
          ASSERT_GT(in_range, 0);
          std::fill(reinterpret_cast<float*>(c.dst.bytes.data()),
                    reinterpret_cast<float*>(c.dst.bytes.data() + c.dst.bytes.size()), NAN);
          KernelError error;
          RunMulMatKernel(&c.dst.t, nth, &error);
          EXPECT_FALSE(error.set.load()) << error.message;
          EXPECT_LT(Nmse(Output(c), ReferenceMulMatId(c)), Tolerance(type))
              << DTypeName(type) << " first " << first << " nth " << nth << " tokens " << tokens;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tg::cpu
