// Tests of the CPU kernels (all but MUL_MAT / MUL_MAT_ID) against naive double-precision
// implementations written here straight from docs/ops.md, over odd shapes, strided and
// permuted views, broadcasting and 1-3 threads.
#include "backends/cpu/kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/compute_params.h"
#include "backends/cpu/kernels/simd_math.h"
#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/fp16.h"
#include "core/quants.h"
#include "core/spin_barrier.h"
#include "core/tensor.h"

namespace tg::cpu {
namespace {

using Shape = std::array<int64_t, 4>;
using Kernel = void (*)(const ComputeParams&, Tensor*);

constexpr double kExactNmse = 1e-12;  // copies and conversions (in practice 0).
constexpr double kMathNmse = 1e-10;   // f32 arithmetic against the f64 reference.
constexpr size_t kGuardBytes = 64;    // canaries around every storage block.
constexpr uint8_t kGuardByte = 0xA5;
constexpr double kInf = std::numeric_limits<double>::infinity();
const int kThreadCounts[] = {1, 2, 3};

std::string ShapeStr(const Shape& ne) {
  return std::to_string(ne[0]) + "x" + std::to_string(ne[1]) + "x" + std::to_string(ne[2]) + "x" +
         std::to_string(ne[3]);
}

// How a test tensor's elements sit in memory.
enum class Layout {
  kContiguous,
  kPadded,      // rows contiguous, gaps after every row and plane.
  kTransposed,  // dims 0 and 1 swapped in memory: a row's elements are strided.
  kPermuted,    // memory order (2, 0, 1, 3): dim 2 innermost.
};

constexpr EnumName<Layout> kLayoutNames[] = {
    {Layout::kContiguous, "contiguous"},
    {Layout::kPadded, "padded"},
    {Layout::kTransposed, "transposed"},
    {Layout::kPermuted, "permuted"},
};

const char* LayoutName(Layout l) { return NameOf(kLayoutNames, l); }

// A tensor's values in logical order, as doubles.
struct Dense {
  Shape ne{1, 1, 1, 1};
  std::vector<double> v;

  explicit Dense(const Shape& shape) : ne(shape), v(shape[0] * shape[1] * shape[2] * shape[3]) {}
  int64_t Index(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    return i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3));
  }
  double& at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) { return v[Index(i0, i1, i2, i3)]; }
  double at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    return v[Index(i0, i1, i2, i3)];
  }
};

// A tensor owning its storage (with canaries on both sides). Not movable: kernels' src
// pointers refer to its Tensor.
class TestTensor {
 public:
  TestTensor(DType type, const Shape& ne, Layout layout = Layout::kContiguous) {
    t_.type = type;
    std::copy(ne.begin(), ne.end(), t_.ne);
    SetStrides(layout);
    const size_t bytes = t_.NumBytes();
    mem_.assign(bytes + 2 * kGuardBytes, kGuardByte);
    t_.data = mem_.data() + kGuardBytes;
    std::memset(t_.data, 0, bytes);
  }
  TestTensor(const TestTensor&) = delete;
  TestTensor& operator=(const TestTensor&) = delete;

  Tensor* get() { return &t_; }
  const Tensor& t() const { return t_; }
  size_t StorageBytes() const { return mem_.size() - 2 * kGuardBytes; }
  std::vector<uint8_t> Bytes() const {
    const auto* p = static_cast<const uint8_t*>(t_.data);
    return std::vector<uint8_t>(p, p + StorageBytes());
  }
  bool GuardsIntact() const {
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (mem_[i] != kGuardByte || mem_[mem_.size() - 1 - i] != kGuardByte) return false;
    }
    return true;
  }

  uint8_t* ElementPtr(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    return static_cast<uint8_t*>(t_.data) + i0 * t_.nb[0] + i1 * t_.nb[1] + i2 * t_.nb[2] +
           i3 * t_.nb[3];
  }

  // Plain types only.
  void Set(int64_t i0, int64_t i1, int64_t i2, int64_t i3, double v) {
    StoreScalar(t_.type, ElementPtr(i0, i1, i2, i3), v);
  }

  // Fills with uniform values in [lo, hi] (integers for I32; quantized: random rows
  // through the reference quantizer). Padding bytes get random garbage too.
  void FillRandom(std::mt19937& rng, double lo, double hi) {
    std::uniform_int_distribution<int> byte(0, 255);
    auto* p = static_cast<uint8_t*>(t_.data);
    for (size_t i = 0; i < StorageBytes(); ++i) p[i] = static_cast<uint8_t>(byte(rng));
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<float> row(t_.ne[0]);
    ForEachRow([&](int64_t i1, int64_t i2, int64_t i3) {
      if (IsQuantized(t_.type)) {
        for (float& x : row) x = static_cast<float>(u(rng));
        QuantizeRow(t_.type, row.data(), ElementPtr(0, i1, i2, i3), t_.ne[0]);
        return;
      }
      for (int64_t i0 = 0; i0 < t_.ne[0]; ++i0) {
        const double v = t_.type == DType::kI32 ? std::round(u(rng)) : u(rng);
        Set(i0, i1, i2, i3, v);
      }
    });
  }

  Dense Values() const {
    Shape ne;
    std::copy(t_.ne, t_.ne + 4, ne.begin());
    Dense d(ne);
    std::vector<float> row(t_.ne[0]);
    ForEachRow([&](int64_t i1, int64_t i2, int64_t i3) {
      if (IsQuantized(t_.type))
        DequantizeRow(t_.type, ElementPtr(0, i1, i2, i3), row.data(), ne[0]);
      for (int64_t i0 = 0; i0 < ne[0]; ++i0) {
        d.at(i0, i1, i2, i3) =
            IsQuantized(t_.type) ? row[i0] : LoadScalar(t_.type, ElementPtr(i0, i1, i2, i3));
      }
    });
    return d;
  }

  static double LoadScalar(DType type, const uint8_t* p) {
    switch (type) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case DType::kF16:
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return type == DType::kF16 ? HalfToFloat(h) : BF16ToFloat(h);
      }
      case DType::kI32: {
        int32_t i;
        std::memcpy(&i, p, 4);
        return i;
      }
      default:
        ADD_FAILURE() << "LoadScalar of a quantized type";
        return 0;
    }
  }

  // The documented conversion of a value to a plain type (round to nearest even for F16 and
  // BF16, to nearest for I32).
  static void StoreScalar(DType type, uint8_t* p, double v) {
    const float f = static_cast<float>(v);
    switch (type) {
      case DType::kF32:
        std::memcpy(p, &f, 4);
        return;
      case DType::kF16: {
        const uint16_t h = FloatToHalf(f);
        std::memcpy(p, &h, 2);
        return;
      }
      case DType::kBF16: {
        const uint16_t h = FloatToBF16(f);
        std::memcpy(p, &h, 2);
        return;
      }
      case DType::kI32: {
        const int32_t i = static_cast<int32_t>(std::nearbyint(f));
        std::memcpy(p, &i, 4);
        return;
      }
      default:
        ADD_FAILURE() << "StoreScalar of a quantized type";
        return;
    }
  }

  template <class F>
  void ForEachRow(F f) const {
    for (int64_t i3 = 0; i3 < t_.ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < t_.ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < t_.ne[1]; ++i1) f(i1, i2, i3);
  }

 private:
  // Strides for the layout: dims are packed in `order` (innermost first), with gaps when
  // padded. Quantized types only support contiguous and padded.
  void SetStrides(Layout layout) {
    std::array<int, 4> order{0, 1, 2, 3};
    if (layout == Layout::kTransposed) order = {1, 0, 2, 3};
    if (layout == Layout::kPermuted) order = {2, 0, 1, 3};
    const size_t es = BlockBytes(t_.type);
    const size_t pad = layout == Layout::kPadded ? 3 * es : 0;
    size_t stride = es;
    for (int k = 0; k < 4; ++k) {
      const int ax = order[k];
      t_.nb[ax] = stride;
      // A quantized row (always innermost here) counts blocks, not elements.
      stride =
          (IsQuantized(t_.type) && ax == 0 ? RowBytes(t_.type, t_.ne[0]) : stride * t_.ne[ax]) +
          pad;
    }
  }

  Tensor t_;
  std::vector<uint8_t> mem_;
};

// Runs the kernel on nth std::threads the way the pool does; returns the error message ("" if
// none). The scratch is followed by canaries that must survive.
std::string RunKernel(Kernel kernel, Tensor* dst, int nth, size_t wsize = 0) {
  Barrier barrier(nth);
  KernelError error;
  std::vector<uint8_t> scratch(wsize + 2 * kGuardBytes, kGuardByte);
  auto* wdata = scratch.data() + kGuardBytes;  // 64-aligned only by luck: kernels must cope.
  std::vector<std::thread> threads;
  for (int ith = 0; ith < nth; ++ith) {
    ComputeParams p;
    p.ith = ith;
    p.nth = nth;
    p.wdata = wsize > 0 ? wdata : nullptr;
    p.wsize = wsize;
    p.barrier = nth > 1 ? &barrier : nullptr;
    p.error = &error;
    threads.emplace_back([kernel, p, dst] { kernel(p, dst); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < kGuardBytes; ++i) {
    EXPECT_EQ(scratch[i], kGuardByte) << "scratch underrun";
    EXPECT_EQ(scratch[scratch.size() - 1 - i], kGuardByte) << "scratch overrun";
  }
  return error.set ? std::string(error.message) : std::string();
}

// sum (x - y)^2 / sum y^2 (plain sum of squares when y is all zeros); NaN anywhere -> inf.
double Nmse(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return kInf;
    if (got[i] == want[i]) {  // also equal infinities.
      den += std::isinf(want[i]) ? 0 : want[i] * want[i];
      continue;
    }
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? num / den : num;
}

// Byte offset of logical element k of t.
size_t ElementOffset(const Tensor& t, int64_t k) {
  size_t off = 0;
  for (int d = 0; d < 4; ++d) {
    off += (k % t.ne[d]) * t.nb[d];
    k /= t.ne[d];
  }
  return off;
}

// Makes `dst` compute `op` over the given sources.
void Wire(TestTensor& dst, Op op, std::initializer_list<Tensor*> srcs) {
  dst.get()->op = op;
  int i = 0;
  for (Tensor* s : srcs) dst.get()->src[i++] = s;
}

// Fills a 1-D I32 index tensor with `rows`, in order.
void SetIndices(TestTensor& idx, std::initializer_list<int32_t> rows) {
  int64_t i = 0;
  for (int32_t r : rows) idx.Set(i++, 0, 0, 0, r);
}

// ---------------------------------------------------------------------------------------
// Vector exp.

TEST(CpuKernelsTest, VectorExpMatchesStdExp) {
  std::vector<float> x;
  for (double v = -87.0; v <= 88.5; v += 0.0137) x.push_back(static_cast<float>(v));
  std::vector<float> y(x.size());
  simd::ExpRow(x.data(), y.data(), x.size());
  double max_rel = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    max_rel = std::max(max_rel, std::abs(y[i] - want) / want);
  }
  EXPECT_LT(max_rel, 3e-7);

  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edge = {-inf,          -200.0f, -104.5f, 0.0f,  -0.0f,  89.0f, 200.0f, inf,
                             std::nanf(""), 1.0f,    -1.0f,   88.7f, -87.3f, 0.5f,  -0.5f,  2.0f};
  std::vector<float> e(edge.size());
  simd::ExpRow(edge.data(), e.data(), edge.size());
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_EQ(e[2], 0.0f);
  EXPECT_EQ(e[3], 1.0f);
  EXPECT_EQ(e[4], 1.0f);
  EXPECT_EQ(e[5], inf);
  EXPECT_EQ(e[6], inf);
  EXPECT_EQ(e[7], inf);
  EXPECT_TRUE(std::isnan(e[8]));
  for (int i : {11, 12, 13, 14, 15}) {
    const double want = std::exp(static_cast<double>(edge[i]));
    EXPECT_NEAR(e[i], want, want * 3e-7) << edge[i];
  }
}

// ---------------------------------------------------------------------------------------
// GET_ROWS / SET_ROWS.

std::vector<int64_t> RowLengths(DType type) {
  if (IsQuantized(type)) return {BlockSize(type), 3 * BlockSize(type)};
  return {1, 5, 31, 64, 67, 257};
}

std::vector<Layout> LayoutsFor(DType type) {
  if (IsQuantized(type)) return {Layout::kContiguous, Layout::kPadded};
  return {Layout::kContiguous, Layout::kPadded, Layout::kTransposed, Layout::kPermuted};
}

TEST(CpuKernelsTest, GetRowsMatchesReference) {
  std::mt19937 rng(1);
  for (DType type : kAllDTypes) {
    for (int64_t n0 : RowLengths(type)) {
      for (Layout layout : LayoutsFor(type)) {
        const Shape a_ne{n0, 7, 3, 2};
        const int64_t nr = 5;
        TestTensor a(type, a_ne, layout);
        a.FillRandom(rng, -100, 100);
        TestTensor idx(DType::kI32, {nr, 3, 2, 1}, Layout::kPadded);
        idx.FillRandom(rng, 0, a_ne[1] - 1);
        const Dense av = a.Values(), iv = idx.Values();
        Dense want({n0, nr, 3, 2});
        for (int64_t j3 = 0; j3 < 2; ++j3)
          for (int64_t j2 = 0; j2 < 3; ++j2)
            for (int64_t i = 0; i < nr; ++i)
              for (int64_t i0 = 0; i0 < n0; ++i0)
                want.at(i0, i, j2, j3) =
                    av.at(i0, static_cast<int64_t>(iv.at(i, j2, j3, 0)), j2, j3);
        for (int nth : kThreadCounts) {
          SCOPED_TRACE(std::string(DTypeName(type)) + " " + ShapeStr(a_ne) + " " +
                       LayoutName(layout) + " nth=" + std::to_string(nth));
          TestTensor out(DType::kF32, want.ne);
          Wire(out, Op::kGetRows, {a.get(), idx.get()});
          EXPECT_EQ(RunKernel(ComputeGetRows, out.get(), nth), "");
          EXPECT_LT(Nmse(out.Values().v, want.v), kExactNmse);
          EXPECT_TRUE(out.GuardsIntact());
        }
      }
    }
  }
}

TEST(CpuKernelsTest, GetRowsReportsBadIndexAndWritesZeros) {
  std::mt19937 rng(2);
  for (int nth : kThreadCounts) {
    TestTensor a(DType::kF16, {8, 5, 1, 1});
    a.FillRandom(rng, -1, 1);
    TestTensor idx(DType::kI32, {4, 1, 1, 1});
    SetIndices(idx, {1, 7, 4, -1});
    TestTensor out(DType::kF32, {8, 4, 1, 1});
    out.FillRandom(rng, 5, 6);
    Wire(out, Op::kGetRows, {a.get(), idx.get()});
    const std::string err = RunKernel(ComputeGetRows, out.get(), nth);
    EXPECT_NE(err.find("GET_ROWS"), std::string::npos) << err;
    EXPECT_TRUE(err.find("index 7 out of range [0, 5)") != std::string::npos ||
                err.find("index -1 out of range [0, 5)") != std::string::npos)
        << err;
    const Dense av = a.Values(), ov = out.Values();
    for (int64_t i0 = 0; i0 < 8; ++i0) {
      EXPECT_EQ(ov.at(i0, 0, 0, 0), av.at(i0, 1, 0, 0));
      EXPECT_EQ(ov.at(i0, 1, 0, 0), 0.0);
      EXPECT_EQ(ov.at(i0, 2, 0, 0), av.at(i0, 4, 0, 0));
      EXPECT_EQ(ov.at(i0, 3, 0, 0), 0.0);
    }
    EXPECT_TRUE(out.GuardsIntact());
  }
}

// The bytes a row of f32 values takes in `type`, by the documented conversion.
std::vector<uint8_t> ConvertedRow(DType type, const std::vector<float>& row) {
  std::vector<uint8_t> bytes(RowBytes(type, row.size()));
  if (IsQuantized(type)) {
    QuantizeRow(type, row.data(), bytes.data(), row.size());
  } else {
    for (size_t i = 0; i < row.size(); ++i) {
      TestTensor::StoreScalar(type, bytes.data() + i * BlockBytes(type), row[i]);
    }
  }
  return bytes;
}

constexpr DType kSetRowsTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16,  DType::kQ8_0,
                                   DType::kQ4_0, DType::kQ4_K,   DType::kQ6_K,  DType::kQ5_0,
                                   DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4, DType::kQ5_K,
                                   DType::kQ3_K, DType::kQ2_K,   DType::kIQ4_XS};

// A SET_ROWS node writing b's rows into a at idx (a's own tensor with the op and sources).
Tensor SetRowsNode(TestTensor& a, TestTensor& b, TestTensor& idx) {
  Tensor dst = a.t();
  dst.op = Op::kSetRows;
  dst.src[0] = a.get();
  dst.src[1] = b.get();
  dst.src[2] = idx.get();
  return dst;
}

// Expected bytes of a after SET_ROWS (distinct target rows, so the result is well defined).
std::vector<uint8_t> SetRowsReference(const TestTensor& a, const TestTensor& b,
                                      const TestTensor& idx) {
  std::vector<uint8_t> want = a.Bytes();
  const Dense bv = b.Values(), iv = idx.Values();
  const Tensor& at = a.t();
  const size_t es = BlockBytes(at.type);
  for (int64_t j3 = 0; j3 < bv.ne[3]; ++j3)
    for (int64_t j2 = 0; j2 < bv.ne[2]; ++j2)
      for (int64_t i = 0; i < bv.ne[1]; ++i) {
        const auto r = static_cast<int64_t>(iv.at(i, j2 % iv.ne[1], j3 % iv.ne[2], 0));
        if (r < 0 || r >= at.ne[1]) continue;
        std::vector<float> row(bv.ne[0]);
        for (int64_t i0 = 0; i0 < bv.ne[0]; ++i0)
          row[i0] = static_cast<float>(bv.at(i0, i, j2, j3));
        const std::vector<uint8_t> bytes = ConvertedRow(at.type, row);
        const size_t base = r * at.nb[1] + j2 * at.nb[2] + j3 * at.nb[3];
        const int64_t n_units = IsQuantized(at.type) ? bytes.size() / es : bv.ne[0];
        for (int64_t u = 0; u < n_units; ++u) {  // element (or block) u at its stride.
          std::memcpy(want.data() + base + u * at.nb[0], bytes.data() + u * es, es);
        }
      }
  return want;
}

TEST(CpuKernelsTest, SetRowsMatchesReference) {
  std::mt19937 rng(3);
  for (DType type : kSetRowsTypes) {
    for (int64_t n0 : RowLengths(type)) {
      for (Layout a_layout : LayoutsFor(type)) {
        const Layout b_layout =
            a_layout == Layout::kContiguous ? Layout::kTransposed : Layout::kContiguous;
        const Shape a_ne{n0, 9, 4, 2};
        const int64_t nr = 4, c1 = 2, c2 = 1;
        for (int nth : kThreadCounts) {
          SCOPED_TRACE(std::string(DTypeName(type)) + " " + ShapeStr(a_ne) + " a " +
                       LayoutName(a_layout) + " b " + LayoutName(b_layout) +
                       " nth=" + std::to_string(nth));
          TestTensor a(type, a_ne, a_layout);
          a.FillRandom(rng, -3, 3);
          TestTensor b(DType::kF32, {n0, nr, 4, 2}, b_layout);
          b.FillRandom(rng, -3, 3);
          TestTensor idx(DType::kI32, {nr, c1, c2, 1});
          for (int64_t j = 0; j < c1 * c2; ++j) {  // distinct rows per (j2 % c1, j3 % c2).
            std::vector<int> perm(a_ne[1]);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            for (int64_t i = 0; i < nr; ++i) idx.Set(i, j % c1, j / c1, 0, perm[i]);
          }
          const std::vector<uint8_t> want = SetRowsReference(a, b, idx);
          Tensor dst = SetRowsNode(a, b, idx);
          dst.view_src = a.get();  // the result aliases a.
          EXPECT_EQ(RunKernel(ComputeSetRows, &dst, nth), "");
          EXPECT_TRUE(a.Bytes() == want);
          EXPECT_TRUE(a.GuardsIntact());
        }
      }
    }
  }
}

TEST(CpuKernelsTest, SetRowsReportsBadIndexAndSkipsRow) {
  std::mt19937 rng(4);
  for (int nth : kThreadCounts) {
    TestTensor a(DType::kQ8_0, {32, 3, 1, 1});
    a.FillRandom(rng, -1, 1);
    TestTensor b(DType::kF32, {32, 3, 1, 1});
    b.FillRandom(rng, -1, 1);
    TestTensor idx(DType::kI32, {3, 1, 1, 1});
    SetIndices(idx, {2, 3, 0});  // 3 is out of range: skipped.
    const std::vector<uint8_t> want = SetRowsReference(a, b, idx);
    Tensor dst = SetRowsNode(a, b, idx);
    const std::string err = RunKernel(ComputeSetRows, &dst, nth);
    EXPECT_NE(err.find("SET_ROWS: row index 3 out of range [0, 3)"), std::string::npos) << err;
    EXPECT_TRUE(a.Bytes() == want);
    EXPECT_TRUE(a.GuardsIntact());
  }
}

// ---------------------------------------------------------------------------------------
// ADD / MUL / SCALE / SILU / SWIGLU.

struct BinaryCase {
  Shape a_ne, b_ne;
  Layout a_layout, b_layout;
};

std::vector<BinaryCase> BinaryCases() {
  std::vector<BinaryCase> cases;
  for (int64_t n0 : {1, 5, 31, 64, 67, 257}) {
    const Shape a{n0, 3, 2, 2};
    cases.push_back({a, a, Layout::kContiguous, Layout::kContiguous});
    cases.push_back({a, {n0, 1, 1, 1}, Layout::kContiguous, Layout::kContiguous});
    cases.push_back({a, {1, 1, 1, 1}, Layout::kContiguous, Layout::kContiguous});
    cases.push_back({a, {1, 3, 1, 2}, Layout::kPadded, Layout::kContiguous});
    cases.push_back({a, {n0, 3, 1, 2}, Layout::kTransposed, Layout::kPermuted});
    cases.push_back({a, {n0, 1, 2, 1}, Layout::kPermuted, Layout::kPadded});
  }
  cases.push_back({{64, 3, 2, 1}, {16, 3, 1, 1}, Layout::kContiguous, Layout::kContiguous});
  cases.push_back({{60, 2, 3, 1}, {20, 1, 3, 1}, Layout::kPadded, Layout::kTransposed});
  return cases;
}

void CheckBinary(Op op, Kernel kernel, double (*f)(double, double)) {
  std::mt19937 rng(5);
  for (const BinaryCase& c : BinaryCases()) {
    TestTensor a(DType::kF32, c.a_ne, c.a_layout);
    TestTensor b(DType::kF32, c.b_ne, c.b_layout);
    a.FillRandom(rng, -2, 2);
    b.FillRandom(rng, -2, 2);
    const Dense av = a.Values(), bv = b.Values();
    Dense want(c.a_ne);
    for (int64_t i3 = 0; i3 < c.a_ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < c.a_ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < c.a_ne[1]; ++i1)
          for (int64_t i0 = 0; i0 < c.a_ne[0]; ++i0)
            want.at(i0, i1, i2, i3) =
                f(av.at(i0, i1, i2, i3),
                  bv.at(i0 % c.b_ne[0], i1 % c.b_ne[1], i2 % c.b_ne[2], i3 % c.b_ne[3]));
    for (int nth : kThreadCounts) {
      SCOPED_TRACE(ShapeStr(c.a_ne) + " " + LayoutName(c.a_layout) + " b " + ShapeStr(c.b_ne) +
                   " " + LayoutName(c.b_layout) + " nth=" + std::to_string(nth));
      TestTensor out(DType::kF32, c.a_ne);
      Wire(out, op, {a.get(), b.get()});
      EXPECT_EQ(RunKernel(kernel, out.get(), nth), "");
      EXPECT_LT(Nmse(out.Values().v, want.v), kMathNmse);
      EXPECT_TRUE(out.GuardsIntact());
    }
  }
}

TEST(CpuKernelsTest, AddMatchesReference) {
  CheckBinary(Op::kAdd, ComputeAdd, [](double x, double y) { return x + y; });
}

TEST(CpuKernelsTest, MulMatchesReference) {
  CheckBinary(Op::kMul, ComputeMul, [](double x, double y) { return x * y; });
}

// In place (dst sharing a's memory, as an allocator may arrange) gives the same result.
TEST(CpuKernelsTest, AddInPlace) {
  std::mt19937 rng(6);
  TestTensor a(DType::kF32, {67, 4, 1, 1});
  TestTensor b(DType::kF32, {67, 1, 1, 1});
  a.FillRandom(rng, -1, 1);
  b.FillRandom(rng, -1, 1);
  const Dense av = a.Values(), bv = b.Values();
  Tensor dst = a.t();
  dst.op = Op::kAdd;
  dst.src[0] = a.get();
  dst.src[1] = b.get();
  EXPECT_EQ(RunKernel(ComputeAdd, &dst, 2), "");
  const Dense got = a.Values();
  for (int64_t i1 = 0; i1 < 4; ++i1)
    for (int64_t i0 = 0; i0 < 67; ++i0)
      EXPECT_EQ(got.at(i0, i1, 0, 0), static_cast<float>(av.at(i0, i1, 0, 0) + bv.at(i0, 0, 0, 0)));
}

std::vector<std::pair<Shape, Layout>> UnaryCases() {
  std::vector<std::pair<Shape, Layout>> cases;
  for (int64_t n0 : {1, 5, 31, 64, 67, 257}) {
    for (Layout l :
         {Layout::kContiguous, Layout::kPadded, Layout::kTransposed, Layout::kPermuted}) {
      cases.push_back({{n0, 3, 2, 2}, l});
    }
  }
  return cases;
}

void CheckUnary(Op op, Kernel kernel, const std::vector<float>& params, double lo, double hi,
                double (*f)(double, const std::vector<float>&), double tolerance) {
  std::mt19937 rng(7);
  for (const auto& [ne, layout] : UnaryCases()) {
    TestTensor a(DType::kF32, ne, layout);
    a.FillRandom(rng, lo, hi);
    Dense want = a.Values();
    for (double& x : want.v) x = f(x, params);
    for (int nth : kThreadCounts) {
      SCOPED_TRACE(ShapeStr(ne) + " " + LayoutName(layout) + " nth=" + std::to_string(nth));
      TestTensor out(DType::kF32, ne);
      Wire(out, op, {a.get()});
      for (size_t i = 0; i < params.size(); ++i) out.get()->SetParamF32(i, params[i]);
      EXPECT_EQ(RunKernel(kernel, out.get(), nth), "");
      EXPECT_LT(Nmse(out.Values().v, want.v), tolerance);
      EXPECT_TRUE(out.GuardsIntact());
    }
  }
}

double SiluRef(double x) { return x / (1.0 + std::exp(-x)); }

TEST(CpuKernelsTest, ScaleMatchesReference) {
  CheckUnary(
      Op::kScale, ComputeScale, {0.37f, -1.25f}, -3, 3,
      [](double x, const std::vector<float>& p) { return x * p[0] + p[1]; }, kMathNmse);
}

TEST(CpuKernelsTest, SiluMatchesReference) {
  CheckUnary(
      Op::kSilu, ComputeSilu, {}, -12, 12,
      [](double x, const std::vector<float>&) { return SiluRef(x); }, kMathNmse);
  CheckUnary(
      Op::kSilu, ComputeSilu, {}, -120, 120,  // exp overflow / underflow regions.
      [](double x, const std::vector<float>&) { return SiluRef(x); }, kMathNmse);
}

TEST(CpuKernelsTest, SiluElementwiseRelativeError) {
  std::vector<float> x;
  for (double v = -30; v <= 30; v += 0.01) x.push_back(static_cast<float>(v));
  TestTensor a(DType::kF32, {static_cast<int64_t>(x.size()), 1, 1, 1});
  std::memcpy(a.get()->data, x.data(), x.size() * 4);
  TestTensor out(DType::kF32, {static_cast<int64_t>(x.size()), 1, 1, 1});
  Wire(out, Op::kSilu, {a.get()});
  RunKernel(ComputeSilu, out.get(), 1);
  const Dense got = out.Values();
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = SiluRef(x[i]);
    ASSERT_NEAR(got.v[i], want, 1e-6 * std::abs(want) + 1e-30) << "x=" << x[i];
  }
}

TEST(CpuKernelsTest, SwigluMatchesReference) {
  std::mt19937 rng(8);
  for (const auto& [ne, layout] : UnaryCases()) {
    const Layout up_layout = layout == Layout::kContiguous ? Layout::kContiguous : Layout::kPadded;
    TestTensor g(DType::kF32, ne, layout);
    TestTensor u(DType::kF32, ne, up_layout);
    g.FillRandom(rng, -10, 10);
    u.FillRandom(rng, -2, 2);
    const Dense gv = g.Values(), uv = u.Values();
    Dense want(ne);
    for (size_t i = 0; i < want.v.size(); ++i) want.v[i] = SiluRef(gv.v[i]) * uv.v[i];
    for (int nth : kThreadCounts) {
      SCOPED_TRACE(ShapeStr(ne) + " " + LayoutName(layout) + " nth=" + std::to_string(nth));
      TestTensor out(DType::kF32, ne);
      Wire(out, Op::kSwiglu, {g.get(), u.get()});
      EXPECT_EQ(RunKernel(ComputeSwiglu, out.get(), nth), "");
      EXPECT_LT(Nmse(out.Values().v, want.v), kMathNmse);
    }
  }
}

// ---------------------------------------------------------------------------------------
// ARGMAX.

// The first index of the largest non-NaN value; 0 for a row of NaN only.
int32_t NaiveArgmax(const std::vector<float>& row) {
  int32_t best = -1;
  for (size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) continue;
    if (best < 0 || row[i] > row[best]) best = static_cast<int32_t>(i);
  }
  return best < 0 ? 0 : best;
}

TEST(CpuKernelsTest, ArgmaxPicksFirstLargestIgnoringNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(21);
  // Row lengths around the vector widths (8, 16) and a vocabulary-sized one.
  for (int64_t n0 : {1, 7, 8, 15, 16, 17, 33, 100, 32000}) {
    const Shape ne = {n0, 9, 1, 1};
    std::vector<std::vector<float>> rows(ne[1], std::vector<float>(n0));
    std::uniform_real_distribution<float> u(-3, 3);
    std::uniform_int_distribution<int64_t> pos(0, n0 - 1);
    for (int64_t r = 0; r < ne[1]; ++r) {
      std::vector<float>& row = rows[r];
      for (float& x : row) x = std::round(u(rng) * 2) / 2;  // coarse values: many ties.
      switch (r) {
        case 0:
          row[pos(rng)] = nan;
          break;  // a NaN somewhere.
        case 1:
          row.assign(n0, nan);
          break;  // NaN only -> 0.
        case 2:
          row.assign(n0, -inf);
          break;  // -inf only -> 0.
        case 3:
          row.assign(n0, nan);
          row[n0 - 1] = -inf;
          break;  // the last is the only number.
        case 4:
          row[pos(rng)] = inf;
          row[pos(rng)] = inf;
          break;  // two +inf: the first.
        case 5:
          row.assign(n0, 1.0f);
          break;  // all equal -> 0.
        case 6:
          row[n0 - 1] = 100.0f;
          break;  // the maximum in the tail.
        default:
          break;  // ties from the coarse values.
      }
    }
    TestTensor a(DType::kF32, ne);
    for (int64_t r = 0; r < ne[1]; ++r) {
      for (int64_t i = 0; i < n0; ++i) a.Set(i, r, 0, 0, rows[r][i]);
    }
    for (int nth : kThreadCounts) {
      SCOPED_TRACE("n0=" + std::to_string(n0) + " nth=" + std::to_string(nth));
      TestTensor out(DType::kI32, {1, ne[1], 1, 1});
      Wire(out, Op::kArgmax, {a.get()});
      EXPECT_EQ(RunKernel(ComputeArgmax, out.get(), nth), "");
      const Dense got = out.Values();
      for (int64_t r = 0; r < ne[1]; ++r) {
        EXPECT_EQ(static_cast<int32_t>(got.at(0, r, 0, 0)), NaiveArgmax(rows[r])) << "row " << r;
      }
      EXPECT_TRUE(out.GuardsIntact());
    }
  }
}

// ---------------------------------------------------------------------------------------
// RMS_NORM.

TEST(CpuKernelsTest, RmsNormMatchesReference) {
  std::mt19937 rng(9);
  const float eps = 1e-5f;
  for (const auto& [ne, layout] : UnaryCases()) {
    TestTensor a(DType::kF32, ne, layout);
    a.FillRandom(rng, -50, 50);
    const Dense av = a.Values();
    Dense want(ne);
    for (int64_t r = 0; r < ne[1] * ne[2] * ne[3]; ++r) {
      double ss = 0;
      for (int64_t i0 = 0; i0 < ne[0]; ++i0) ss += av.v[r * ne[0] + i0] * av.v[r * ne[0] + i0];
      const double inv = 1.0 / std::sqrt(ss / ne[0] + static_cast<double>(eps));
      for (int64_t i0 = 0; i0 < ne[0]; ++i0) want.v[r * ne[0] + i0] = av.v[r * ne[0] + i0] * inv;
    }
    for (int nth : kThreadCounts) {
      SCOPED_TRACE(ShapeStr(ne) + " " + LayoutName(layout) + " nth=" + std::to_string(nth));
      TestTensor out(DType::kF32, ne);
      Wire(out, Op::kRmsNorm, {a.get()});
      out.get()->SetParamF32(0, eps);
      EXPECT_EQ(RunKernel(ComputeRmsNorm, out.get(), nth), "");
      EXPECT_LT(Nmse(out.Values().v, want.v), kExactNmse);
    }
  }
}

TEST(CpuKernelsTest, RmsNormOfZerosIsZeros) {
  TestTensor a(DType::kF32, {67, 2, 1, 1});
  TestTensor out(DType::kF32, {67, 2, 1, 1});
  Wire(out, Op::kRmsNorm, {a.get()});
  out.get()->SetParamF32(0, 1e-6f);
  RunKernel(ComputeRmsNorm, out.get(), 1);
  for (double v : out.Values().v) EXPECT_EQ(v, 0.0);
}

// ---------------------------------------------------------------------------------------
// ROPE.

struct RopeCase {
  int64_t head_dim;
  int n_dims;
  int mode;
  bool freq_factors;
  float freq_scale, ext_factor, attn_factor;
  Layout layout;
};

// The documented ROPE, in double.
Dense RopeReference(const Dense& x, const std::vector<int32_t>& pos, const Dense* ff,
                    const Tensor& params) {
  const int n_dims = params.op_params[0];
  const bool neox = params.op_params[1] == 2;
  const double n_ctx_orig = params.op_params[2];
  const double base = params.ParamF32(3), fs = params.ParamF32(4), ext = params.ParamF32(5);
  const double attn = params.ParamF32(6), beta_fast = params.ParamF32(7);
  const double beta_slow = params.ParamF32(8);
  auto corr_dim = [&](double n_rot) {
    return n_dims * std::log(n_ctx_orig / (n_rot * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  const double lo = std::max(0.0, std::floor(corr_dim(beta_fast)));
  const double hi = std::min(n_dims - 1.0, std::ceil(corr_dim(beta_slow)));
  Dense y = x;
  for (int64_t i3 = 0; i3 < x.ne[3]; ++i3)
    for (int64_t t = 0; t < x.ne[2]; ++t)
      for (int64_t h = 0; h < x.ne[1]; ++h)
        for (int i = 0; i < n_dims / 2; ++i) {
          const double ffi = ff != nullptr ? ff->v[i] : 1.0;
          const double te = pos[t] * std::pow(base, -2.0 * i / n_dims) / ffi;
          const double ti = fs * te;
          double theta = ti, mscale = attn;
          if (ext != 0) {
            const double ramp =
                1 - std::min(1.0, std::max(0.0, (i - lo) / std::max(0.001, hi - lo)));
            const double mix = ramp * ext;
            theta = ti * (1 - mix) + te * mix;
            mscale = attn * (1 + 0.1 * std::log(1 / fs));
          }
          const int64_t k0 = neox ? i : 2 * i, k1 = neox ? i + n_dims / 2 : 2 * i + 1;
          const double x0 = x.at(k0, h, t, i3), x1 = x.at(k1, h, t, i3);
          y.at(k0, h, t, i3) = (x0 * std::cos(theta) - x1 * std::sin(theta)) * mscale;
          y.at(k1, h, t, i3) = (x0 * std::sin(theta) + x1 * std::cos(theta)) * mscale;
        }
  return y;
}

TEST(CpuKernelsTest, RopeMatchesReference) {
  std::mt19937 rng(10);
  std::vector<RopeCase> cases;
  for (int mode : {0, 2}) {
    cases.push_back({64, 64, mode, false, 1.0f, 0.0f, 1.0f, Layout::kContiguous});
    cases.push_back({128, 128, mode, true, 1.0f, 0.0f, 1.0f, Layout::kPadded});
    cases.push_back({80, 32, mode, false, 0.5f, 0.0f, 0.9f, Layout::kTransposed});  // partial.
    cases.push_back({64, 64, mode, false, 0.25f, 1.0f, 1.0f, Layout::kPermuted});   // YaRN.
    cases.push_back({96, 48, mode, true, 0.125f, 0.5f, 1.1f, Layout::kPadded});     // all.
    cases.push_back({6, 2, mode, false, 1.0f, 0.0f, 1.0f, Layout::kContiguous});
    cases.push_back({34, 34, mode, true, 1.0f, 0.0f, 1.0f, Layout::kTransposed});
  }
  for (const RopeCase& c : cases) {
    const Shape ne{c.head_dim, 5, 4, 2};
    TestTensor a(DType::kF32, ne, c.layout);
    a.FillRandom(rng, -3, 3);
    TestTensor pos(DType::kI32, {ne[2], 1, 1, 1});
    const int32_t positions[] = {0, 7, 4095, 131071};
    for (int t = 0; t < ne[2]; ++t) pos.Set(t, 0, 0, 0, positions[t]);
    TestTensor ff(DType::kF32, {c.n_dims / 2, 1, 1, 1});
    ff.FillRandom(rng, 1, 40);
    const Dense ffv = ff.Values();
    for (int nth : kThreadCounts) {
      SCOPED_TRACE("head_dim=" + std::to_string(c.head_dim) +
                   " n_dims=" + std::to_string(c.n_dims) + " mode=" + std::to_string(c.mode) +
                   " ff=" + std::to_string(c.freq_factors) +
                   " ext=" + std::to_string(c.ext_factor) + " " + LayoutName(c.layout) +
                   " nth=" + std::to_string(nth));
      TestTensor out(DType::kF32, ne);
      Wire(out, Op::kRope, {a.get(), pos.get(), c.freq_factors ? ff.get() : nullptr});
      Tensor* d = out.get();
      d->op_params[0] = c.n_dims;
      d->op_params[1] = c.mode;
      d->op_params[2] = 4096;
      d->SetParamF32(3, 10000.0f);
      d->SetParamF32(4, c.freq_scale);
      d->SetParamF32(5, c.ext_factor);
      d->SetParamF32(6, c.attn_factor);
      d->SetParamF32(7, 32.0f);
      d->SetParamF32(8, 1.0f);
      const std::vector<int32_t> pv(positions, positions + ne[2]);
      const Dense want = RopeReference(a.Values(), pv, c.freq_factors ? &ffv : nullptr, *d);
      EXPECT_EQ(RunKernel(ComputeRope, d, nth), "");
      EXPECT_LT(Nmse(out.Values().v, want.v), kMathNmse);
      EXPECT_TRUE(out.GuardsIntact());
    }
  }
}

// ---------------------------------------------------------------------------------------
// SOFT_MAX.

struct SoftMaxCase {
  Shape ne;
  DType mask_type;  // kI32 = no mask.
  Shape mask_ne;
  Layout layout;
};

TEST(CpuKernelsTest, SoftMaxMatchesReference) {
  std::mt19937 rng(11);
  std::vector<SoftMaxCase> cases;
  for (int64_t n : {1, 5, 31, 64, 67, 257}) {
    cases.push_back({{n, 3, 2, 2}, DType::kI32, {}, Layout::kContiguous});
    cases.push_back({{n, 3, 2, 2}, DType::kF32, {n, 3, 2, 2}, Layout::kTransposed});
    cases.push_back({{n, 3, 2, 2}, DType::kF16, {n, 5, 1, 1}, Layout::kContiguous});
    cases.push_back({{n, 3, 4, 2}, DType::kF32, {n, 4, 2, 1}, Layout::kPermuted});
    cases.push_back({{n, 3, 4, 2}, DType::kF16, {n, 3, 2, 2}, Layout::kPadded});
  }
  const float scale = 0.7f;
  for (const SoftMaxCase& c : cases) {
    TestTensor a(DType::kF32, c.ne, c.layout);
    a.FillRandom(rng, -8, 8);
    const bool has_mask = c.mask_type != DType::kI32;
    TestTensor mask(has_mask ? c.mask_type : DType::kF32, has_mask ? c.mask_ne : Shape{1, 1, 1, 1},
                    Layout::kPadded);
    if (has_mask) {
      mask.FillRandom(rng, -4, 4);
      std::bernoulli_distribution masked(0.3);
      mask.ForEachRow([&](int64_t i1, int64_t i2, int64_t i3) {
        for (int64_t i0 = 0; i0 < c.mask_ne[0]; ++i0) {
          if (masked(rng) || i1 == 1) mask.Set(i0, i1, i2, i3, -kInf);  // row 1 fully masked.
        }
      });
    }
    const Dense av = a.Values(), mv = mask.Values();
    Dense want(c.ne);
    std::vector<double> row(c.ne[0]);
    for (int64_t i3 = 0; i3 < c.ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < c.ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < c.ne[1]; ++i1) {
          double mx = -kInf;
          for (int64_t i0 = 0; i0 < c.ne[0]; ++i0) {
            const double m = has_mask ? mv.at(i0, i1, i2 % mv.ne[2], i3 % mv.ne[3]) : 0.0;
            row[i0] = av.at(i0, i1, i2, i3) * scale + m;
            mx = std::max(mx, row[i0]);
          }
          double sum = 0;
          for (double& v : row) sum += v = mx == -kInf ? 0 : std::exp(v - mx);
          for (int64_t i0 = 0; i0 < c.ne[0]; ++i0)
            want.at(i0, i1, i2, i3) = sum > 0 ? row[i0] / sum : 0;
        }
    for (int nth : kThreadCounts) {
      SCOPED_TRACE(ShapeStr(c.ne) + " mask " + (has_mask ? DTypeName(c.mask_type) : "none") + " " +
                   ShapeStr(c.mask_ne) + " " + LayoutName(c.layout) +
                   " nth=" + std::to_string(nth));
      TestTensor out(DType::kF32, c.ne);
      Wire(out, Op::kSoftMax, {a.get(), has_mask ? mask.get() : nullptr});
      out.get()->SetParamF32(0, scale);
      EXPECT_EQ(RunKernel(ComputeSoftMax, out.get(), nth), "");
      EXPECT_LT(Nmse(out.Values().v, want.v), kMathNmse);
      EXPECT_TRUE(out.GuardsIntact());
    }
  }
}

// ---------------------------------------------------------------------------------------
// CPY / CONT.

struct CpyCase {
  DType src, dst;
  Shape src_ne, dst_ne;
  Layout src_layout, dst_layout;
};

std::string Describe(const CpyCase& c) {
  return std::string(DTypeName(c.src)) + " " + ShapeStr(c.src_ne) + " " + LayoutName(c.src_layout) +
         " -> " + DTypeName(c.dst) + " " + ShapeStr(c.dst_ne) + " " + LayoutName(c.dst_layout);
}

std::vector<CpyCase> CpyCases() {
  using enum Layout;
  std::vector<CpyCase> cases;
  const std::pair<DType, DType> plain[] = {
      {DType::kF32, DType::kF32},  {DType::kF32, DType::kF16},  {DType::kF32, DType::kBF16},
      {DType::kF16, DType::kF32},  {DType::kF16, DType::kF16},  {DType::kF16, DType::kBF16},
      {DType::kBF16, DType::kF32}, {DType::kBF16, DType::kF16}, {DType::kBF16, DType::kBF16},
      {DType::kI32, DType::kF32},  {DType::kF32, DType::kI32},  {DType::kI32, DType::kI32}};
  for (const auto& [s, d] : plain) {
    for (int64_t n0 : {1, 5, 67, 257}) {
      const Shape ne{n0, 5, 3, 2};
      cases.push_back({s, d, ne, ne, kContiguous, kContiguous});
      cases.push_back({s, d, ne, ne, kTransposed, kContiguous});
      cases.push_back({s, d, ne, ne, kContiguous, kPadded});
      cases.push_back({s, d, ne, ne, kPermuted, kTransposed});
    }
    cases.push_back({s, d, {6, 5, 4, 1}, {10, 3, 2, 2}, kPadded, kContiguous});
    cases.push_back({s, d, {6, 5, 4, 1}, {4, 15, 1, 2}, kTransposed, kPadded});
    cases.push_back({s, d, {1, 31, 1, 1}, {31, 1, 1, 1}, kContiguous, kContiguous});
    cases.push_back({s, d, {31, 1, 1, 1}, {1, 31, 1, 1}, kContiguous, kPermuted});
  }
  for (DType q :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_0, DType::kQ5_1,
        DType::kIQ4_NL, DType::kMXFP4, DType::kQ5_K, DType::kQ3_K, DType::kQ2_K, DType::kIQ4_XS}) {
    const int64_t bs = BlockSize(q);
    for (const auto& [s, d] : {std::pair{DType::kF32, q}, {q, DType::kF32}, {q, q}}) {
      const Shape ne{2 * bs, 3, 2, 1};
      cases.push_back({s, d, ne, ne, kContiguous, kContiguous});
      cases.push_back({s, d, ne, ne, kPadded, kContiguous});
      cases.push_back({s, d, ne, ne, kContiguous, kPadded});
      cases.push_back({s, d, {bs, 6, 1, 1}, {bs, 2, 3, 1}, kPadded, kPadded});
    }
  }
  return cases;
}

// Expected storage of dst after copying a into it.
std::vector<uint8_t> CpyReference(const TestTensor& a, const TestTensor& dst) {
  std::vector<uint8_t> want = dst.Bytes();
  const Dense av = a.Values();
  const Tensor& d = dst.t();
  if (IsQuantized(d.type) || IsQuantized(a.t().type)) {  // rows map in order.
    for (int64_t r = 0; r < d.ne[1] * d.ne[2] * d.ne[3]; ++r) {
      const size_t off = ElementOffset(d, r * d.ne[0]);
      if (d.type == a.t().type) {  // same quantized type: the blocks, bit for bit.
        const size_t src_off = ElementOffset(a.t(), r * d.ne[0]);
        std::memcpy(want.data() + off, static_cast<const uint8_t*>(a.t().data) + src_off,
                    d.RowBytes());
        continue;
      }
      std::vector<float> row(d.ne[0]);
      for (int64_t i = 0; i < d.ne[0]; ++i) row[i] = static_cast<float>(av.v[r * d.ne[0] + i]);
      if (IsQuantized(d.type)) {
        const std::vector<uint8_t> bytes = ConvertedRow(d.type, row);
        std::memcpy(want.data() + off, bytes.data(), bytes.size());
      } else {
        for (int64_t i = 0; i < d.ne[0]; ++i) {
          TestTensor::StoreScalar(d.type, want.data() + ElementOffset(d, r * d.ne[0] + i), row[i]);
        }
      }
    }
    return want;
  }
  for (int64_t k = 0; k < static_cast<int64_t>(av.v.size()); ++k) {
    uint8_t* p = want.data() + ElementOffset(d, k);
    if (d.type == a.t().type) {  // same type: bits, whatever they are.
      std::memcpy(p, static_cast<const uint8_t*>(a.t().data) + ElementOffset(a.t(), k),
                  BlockBytes(d.type));
    } else {
      TestTensor::StoreScalar(d.type, p, av.v[k]);
    }
  }
  return want;
}

void FillForCpy(TestTensor& a, DType dst_type, std::mt19937& rng) {
  if (a.t().type == DType::kI32) {
    a.FillRandom(rng, -1e6, 1e6);
  } else if (dst_type == DType::kI32) {  // no exact ties: x.1 .. x.4 or x.6 .. x.9.
    std::uniform_int_distribution<int> whole(-1000, 1000);
    std::uniform_real_distribution<double> frac(0.1, 0.4);
    std::bernoulli_distribution up(0.5);
    a.ForEachRow([&](int64_t i1, int64_t i2, int64_t i3) {
      for (int64_t i0 = 0; i0 < a.t().ne[0]; ++i0) {
        a.Set(i0, i1, i2, i3, whole(rng) + (up(rng) ? 0.5 : 0.0) + frac(rng));
      }
    });
  } else {
    a.FillRandom(rng, -70000, 70000);  // beyond f16 range: checks inf rounding too.
  }
}

TEST(CpuKernelsTest, CpyMatchesReference) {
  std::mt19937 rng(12);
  for (const CpyCase& c : CpyCases()) {
    TestTensor a(c.src, c.src_ne, c.src_layout);
    FillForCpy(a, c.dst, rng);
    for (int nth : kThreadCounts) {
      SCOPED_TRACE(Describe(c) + " nth=" + std::to_string(nth));
      TestTensor b(c.dst, c.dst_ne, c.dst_layout);
      b.FillRandom(rng, -1, 1);  // padding keeps its garbage: the copy must not touch it.
      const std::vector<uint8_t> want = CpyReference(a, b);
      Tensor dst = b.t();  // CPY's result is a view of b.
      dst.op = Op::kCpy;
      dst.src[0] = a.get();
      dst.src[1] = b.get();
      dst.view_src = b.get();
      EXPECT_EQ(RunKernel(ComputeCpy, &dst, nth), "");
      const std::vector<uint8_t> got = b.Bytes();
      size_t diffs = 0;
      for (size_t i = 0; i < got.size(); ++i) diffs += got[i] != want[i];
      EXPECT_EQ(diffs, 0u);
      EXPECT_TRUE(b.GuardsIntact());
    }
  }
}

// Special values through the vector conversions: NaN, infinities, signed zeros, denormals,
// f16 overflow and exact rounding ties (bit-exact with core/fp16.h).
TEST(CpuKernelsTest, CpyConvertsSpecialValuesExactly) {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::nanf(""),
                            -std::nanf(""),
                            inf,
                            -inf,
                            0.0f,
                            -0.0f,
                            1e-45f,
                            -1e-40f,
                            6e-8f,
                            3e-8f,
                            65504.0f,
                            65519.0f,
                            65520.0f,
                            -70000.0f,
                            BitsFloat(0x3f808000u),
                            BitsFloat(0x3f818000u),
                            BitsFloat(0x3f808001u),
                            1.0f + 1.0f / 2048,
                            1.0f + 3.0f / 2048};
  const int64_t n = 53;  // vector body plus a tail.
  for (DType dst_type : {DType::kF16, DType::kBF16}) {
    TestTensor a(DType::kF32, {n, 1, 1, 1});
    for (int64_t i = 0; i < n; ++i) {
      const float v = specials[i % std::size(specials)];
      std::memcpy(a.ElementPtr(i, 0, 0, 0), &v, sizeof(v));
    }
    TestTensor out(dst_type, {n, 1, 1, 1});
    TestTensor back(DType::kF32, {n, 1, 1, 1});
    Tensor dst = out.t();
    dst.op = Op::kCpy;
    dst.src[0] = a.get();
    dst.src[1] = out.get();
    EXPECT_EQ(RunKernel(ComputeCpy, &dst, 1), "");
    Tensor to_f32 = back.t();
    to_f32.op = Op::kCpy;
    to_f32.src[0] = out.get();
    to_f32.src[1] = back.get();
    EXPECT_EQ(RunKernel(ComputeCpy, &to_f32, 1), "");
    for (int64_t i = 0; i < n; ++i) {
      const float v = specials[i % std::size(specials)];
      uint16_t got;
      std::memcpy(&got, out.ElementPtr(i, 0, 0, 0), sizeof(got));
      const uint16_t want = dst_type == DType::kF16 ? FloatToHalf(v) : FloatToBF16(v);
      EXPECT_EQ(got, want) << DTypeName(dst_type) << " of " << v << " at " << i;
      float round_trip;
      std::memcpy(&round_trip, back.ElementPtr(i, 0, 0, 0), sizeof(round_trip));
      const float want_back = dst_type == DType::kF16 ? HalfToFloat(want) : BF16ToFloat(want);
      EXPECT_EQ(FloatBits(round_trip), FloatBits(want_back)) << "back from " << v << " at " << i;
    }
  }
}

TEST(CpuKernelsTest, ContMatchesReference) {
  std::mt19937 rng(13);
  for (DType type : kAllDTypes) {
    for (Layout layout : LayoutsFor(type)) {
      const Shape ne{IsQuantized(type) ? BlockSize(type) : 67, 5, 3, 2};
      TestTensor a(type, ne, layout);
      a.FillRandom(rng, -5, 5);
      for (int nth : kThreadCounts) {
        SCOPED_TRACE(std::string(DTypeName(type)) + " " + LayoutName(layout) +
                     " nth=" + std::to_string(nth));
        TestTensor out(type, ne);
        Wire(out, Op::kCont, {a.get()});
        const std::vector<uint8_t> want = CpyReference(a, out);
        EXPECT_EQ(RunKernel(ComputeCpy, out.get(), nth), "");
        EXPECT_TRUE(out.Bytes() == want);
        EXPECT_TRUE(out.GuardsIntact());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// FLASH_ATTN.

struct FlashCase {
  int64_t d, dv, n_q, n_kv, n_head, n_head_kv, batch;
  DType kv_type;
  DType mask_type;  // kI32 = no mask.
  Layout q_layout, kv_layout;
};

// The documented attention, in double: dst[:, h, i, b]. With F16 keys, q is rounded to F16
// first (the scores are F16 x F16 dot products, docs/ops.md).
Dense FlashReference(const Dense& q, const Dense& k, const Dense& v, const Dense* mask, float scale,
                     const Shape& out_ne, DType k_type) {
  Dense out(out_ne);
  const int64_t n_kv = k.ne[1], group = q.ne[2] / k.ne[2];
  std::vector<double> s(n_kv);
  for (int64_t b = 0; b < q.ne[3]; ++b)
    for (int64_t h = 0; h < q.ne[2]; ++h)
      for (int64_t i = 0; i < q.ne[1]; ++i) {
        const int64_t hk = h / group;
        double mx = -kInf;
        for (int64_t j = 0; j < n_kv; ++j) {
          const double m = mask != nullptr ? mask->at(j, i, 0, 0) : 0.0;
          double dot = 0;
          for (int64_t c = 0; c < q.ne[0]; ++c) {
            double qc = q.at(c, i, h, b);
            if (k_type == DType::kF16) qc = HalfToFloat(FloatToHalf(static_cast<float>(qc)));
            dot += qc * k.at(c, j, hk, b);
          }
          s[j] = m == -kInf ? -kInf : scale * dot + m;  // a masked key is never looked at.
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += x = mx == -kInf ? 0 : std::exp(x - mx);
        for (int64_t c = 0; c < v.ne[0]; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < n_kv; ++j) acc += s[j] != 0 ? s[j] * v.at(c, j, hk, b) : 0.0;
          out.at(c, h, i, b) = sum > 0 ? acc / sum : 0;
        }
      }
  return out;
}

TEST(CpuKernelsTest, FlashAttnMatchesReference) {
  using enum Layout;
  std::mt19937 rng(14);
  std::vector<FlashCase> cases = {
      {64, 64, 1, 1, 4, 4, 1, DType::kF32, DType::kI32, kContiguous, kContiguous},
      {64, 64, 7, 33, 4, 2, 1, DType::kF16, DType::kF16, kContiguous, kContiguous},
      {128, 128, 5, 256, 8, 2, 1, DType::kF16, DType::kF16, kPermuted, kPadded},
      {67, 31, 3, 17, 6, 3, 2, DType::kF32, DType::kF32, kTransposed, kPadded},
      {5, 5, 4, 9, 2, 1, 2, DType::kF16, DType::kF32, kPadded, kTransposed},
      {40, 24, 9, 100, 4, 4, 1, DType::kF32, DType::kF16, kPermuted, kPermuted},
      {1, 1, 2, 3, 1, 1, 1, DType::kF16, DType::kI32, kContiguous, kTransposed},
      {128, 128, 1, 100, 8, 2, 1, DType::kF16, DType::kF16, kContiguous, kPadded},  // decode.
      {64, 64, 20, 70, 16, 2, 1, DType::kF32, DType::kF16, kContiguous, kContiguous},
  };
  const float scale = 0.125f;
  for (const FlashCase& c : cases) {
    TestTensor q(DType::kF32, {c.d, c.n_q, c.n_head, c.batch}, c.q_layout);
    TestTensor k(c.kv_type, {c.d, c.n_kv, c.n_head_kv, c.batch}, c.kv_layout);
    TestTensor v(c.kv_type, {c.dv, c.n_kv, c.n_head_kv, c.batch}, c.kv_layout);
    q.FillRandom(rng, -1, 1);
    k.FillRandom(rng, -1, 1);
    v.FillRandom(rng, -1, 1);
    const bool has_mask = c.mask_type != DType::kI32;
    TestTensor mask(has_mask ? c.mask_type : DType::kF32, {c.n_kv, c.n_q + 2, 1, 1}, kPadded);
    if (has_mask) {  // causal-like with random extra masking; query row 1 fully masked.
      mask.FillRandom(rng, -2, 2);
      std::bernoulli_distribution masked(0.2);
      for (int64_t i = 0; i < c.n_q + 2; ++i)
        for (int64_t j = 0; j < c.n_kv; ++j)
          if (j > c.n_kv - c.n_q + i || masked(rng) || i == 1) mask.Set(j, i, 0, 0, -kInf);
    }
    const Dense mv = mask.Values();
    const Shape out_ne{c.dv, c.n_head, c.n_q, c.batch};
    const Dense want = FlashReference(q.Values(), k.Values(), v.Values(), has_mask ? &mv : nullptr,
                                      scale, out_ne, c.kv_type);
    for (int nth : kThreadCounts) {
      SCOPED_TRACE("D=" + std::to_string(c.d) + " Dv=" + std::to_string(c.dv) +
                   " n_q=" + std::to_string(c.n_q) + " n_kv=" + std::to_string(c.n_kv) +
                   " H=" + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + " kv " +
                   DTypeName(c.kv_type) + " nth=" + std::to_string(nth));
      TestTensor out(DType::kF32, out_ne);
      Wire(out, Op::kFlashAttn, {q.get(), k.get(), v.get(), has_mask ? mask.get() : nullptr});
      out.get()->SetParamF32(0, scale);
      const size_t wsize = FlashAttnWorkSize(out.get(), nth);
      EXPECT_EQ(RunKernel(ComputeFlashAttn, out.get(), nth, wsize), "");
      EXPECT_LT(Nmse(out.Values().v, want.v), kMathNmse);
      EXPECT_TRUE(out.GuardsIntact());
    }
  }
}

// Keys masked for every query row are never read: stale KV cache slots holding NaN or inf
// (as an unused cache tail may) must not leak into the result.
TEST(CpuKernelsTest, FlashAttnIgnoresMaskedGarbage) {
  std::mt19937 rng(15);
  const int64_t d = 32, n_q = 3, n_kv = 45, n_visible = 30, n_head = 4;
  TestTensor q(DType::kF32, {d, n_q, n_head, 1});
  TestTensor k(DType::kF16, {d, n_kv, 2, 1});
  TestTensor v(DType::kF16, {d, n_kv, 2, 1});
  TestTensor mask(DType::kF32, {n_kv, n_q, 1, 1});
  q.FillRandom(rng, -1, 1);
  k.FillRandom(rng, -1, 1);
  v.FillRandom(rng, -1, 1);
  const double garbage[] = {std::nan(""), kInf, -kInf};
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = n_visible; j < n_kv; ++j)
      for (int64_t c = 0; c < d; ++c) {
        k.Set(c, j, h, 0, garbage[(c + j) % 3]);
        v.Set(c, j, h, 0, garbage[(c + j + 1) % 3]);
      }
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t j = 0; j < n_kv; ++j) mask.Set(j, i, 0, 0, j < n_visible ? 0.0 : -kInf);
  const Dense mv = mask.Values();
  const Shape out_ne{d, n_head, n_q, 1};
  const Dense want =
      FlashReference(q.Values(), k.Values(), v.Values(), &mv, 0.5f, out_ne, DType::kF16);
  for (int nth : kThreadCounts) {
    TestTensor out(DType::kF32, out_ne);
    Wire(out, Op::kFlashAttn, {q.get(), k.get(), v.get(), mask.get()});
    out.get()->SetParamF32(0, 0.5f);
    EXPECT_EQ(RunKernel(ComputeFlashAttn, out.get(), nth, FlashAttnWorkSize(out.get(), nth)), "");
    EXPECT_LT(Nmse(out.Values().v, want.v), kMathNmse) << "nth=" << nth;
  }
}

// Model-shaped FLASH_ATTN operands: q a permuted view [D, n_q, H] of a [D, H, n_q] tensor and
// K/V views [D, n_kv, H_kv] into cache rows of H_kv * D values per position, as
// models/llama_graph.cc builds them.
class FlashModelOperands {
 public:
  FlashModelOperands(int64_t d, int64_t n_q, int64_t n_kv, int64_t n_head, int64_t n_head_kv,
                     DType kv_type)
      : d_(d),
        q_(DType::kF32, {d, n_head, n_q, 1}),
        k_(kv_type, {d * n_head_kv, n_kv, 1, 1}),
        v_(kv_type, {d * n_head_kv, n_kv, 1, 1}) {
    q_view_ = View(q_, {d, n_q, n_head, 1}, {4, q_.t().nb[2], q_.t().nb[1], q_.t().nb[3]});
    const size_t es = BlockBytes(kv_type);
    for (auto [cache, view] : {std::pair{&k_, &k_view_}, std::pair{&v_, &v_view_}}) {
      const size_t row = cache->t().nb[1];
      *view = View(*cache, {d, n_kv, n_head_kv, 1}, {es, row, d * es, row * n_kv});
    }
  }

  void Fill(std::mt19937& rng) {
    for (TestTensor* t : {&q_, &k_, &v_}) t->FillRandom(rng, -1, 1);
  }
  // Cache cell j (all heads) of K and V holds garbage that a mask must hide.
  void Poison(int64_t j, double value) {
    for (TestTensor* t : {&k_, &v_})
      for (int64_t c = 0; c < t->t().ne[0]; ++c) t->Set(c, j, 0, 0, value);
  }
  Tensor* q() { return &q_view_; }
  Tensor* k() { return &k_view_; }
  Tensor* v() { return &v_view_; }
  Dense QValues() const { return ViewValues(q_.Values(), q_view_, /*q=*/true); }
  Dense KValues() const { return ViewValues(k_.Values(), k_view_, false); }
  Dense VValues() const { return ViewValues(v_.Values(), v_view_, false); }

 private:
  static Tensor View(TestTensor& base, const Shape& ne, const std::array<size_t, 4>& nb) {
    Tensor view = base.t();
    std::copy(ne.begin(), ne.end(), view.ne);
    std::copy(nb.begin(), nb.end(), view.nb);
    return view;
  }
  // The view's logical values from its base's.
  Dense ViewValues(const Dense& base, const Tensor& view, bool q) const {
    Dense out({view.ne[0], view.ne[1], view.ne[2], 1});
    for (int64_t i2 = 0; i2 < view.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < view.ne[1]; ++i1)
        for (int64_t c = 0; c < view.ne[0]; ++c)
          out.at(c, i1, i2, 0) = q ? base.at(c, i2, i1, 0) : base.at(c + i2 * d_, i1, 0, 0);
    return out;
  }

  int64_t d_;
  TestTensor q_, k_, v_;
  Tensor q_view_, k_view_, v_view_;
};

// Runs FLASH_ATTN on model-shaped operands with mask[j, i] = mask_at(i, j) (F32 or F16) for
// each thread count and compares with the reference.
template <class MaskAt>
void CheckFlashModelShape(FlashModelOperands& ops, DType mask_type, MaskAt mask_at,
                          std::initializer_list<int> thread_counts) {
  const Tensor& q = *ops.q();
  const int64_t n_kv = ops.k()->ne[1], n_q = q.ne[1], n_head = q.ne[2], d = q.ne[0];
  TestTensor mask(mask_type, {n_kv, n_q, 1, 1});
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t j = 0; j < n_kv; ++j) mask.Set(j, i, 0, 0, mask_at(i, j));
  const Dense mv = mask.Values();
  const Shape out_ne{ops.v()->ne[0], n_head, n_q, 1};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Dense want = FlashReference(ops.QValues(), ops.KValues(), ops.VValues(), &mv, scale, out_ne,
                                    ops.k()->type);
  for (int nth : thread_counts) {
    SCOPED_TRACE("D=" + std::to_string(d) + " n_q=" + std::to_string(n_q) +
                 " n_kv=" + std::to_string(n_kv) + " H=" + std::to_string(n_head) + "/" +
                 std::to_string(ops.k()->ne[2]) + " nth=" + std::to_string(nth));
    TestTensor out(DType::kF32, out_ne);
    Wire(out, Op::kFlashAttn, {ops.q(), ops.k(), ops.v(), mask.get()});
    out.get()->SetParamF32(0, scale);
    EXPECT_EQ(RunKernel(ComputeFlashAttn, out.get(), nth, FlashAttnWorkSize(out.get(), nth)), "");
    EXPECT_LT(Nmse(out.Values().v, want.v), kMathNmse);
    EXPECT_TRUE(out.GuardsIntact());
  }
}

// Prefill under causal-like masks: key blocks hidden from a whole tile are skipped and the
// blocks on the diagonal are partly hidden per row; D = 8 (stories260K) and D = 48 (stories15M).
TEST(CpuKernelsTest, FlashAttnPrefillMasks) {
  std::mt19937 rng(16);
  const double inf = kInf;
  struct Shape5 {
    int64_t d, n_q, n_past, n_head, n_head_kv;
  };
  // The last shape's K/V are too big to stage per KV head: converted per tile and block.
  for (const Shape5& s :
       {Shape5{8, 200, 0, 8, 4}, Shape5{48, 70, 45, 6, 6}, Shape5{64, 33, 100, 4, 1},
        Shape5{8, 5, 60, 8, 4}, Shape5{128, 24, 1076, 4, 2}}) {
    const int64_t n_kv = s.n_past + s.n_q;
    FlashModelOperands ops(s.d, s.n_q, n_kv, s.n_head, s.n_head_kv, DType::kF16);
    ops.Fill(rng);
    const int64_t past = s.n_past;
    auto causal = [=](int64_t i, int64_t j) { return j <= past + i ? 0.0 : -inf; };
    CheckFlashModelShape(ops, DType::kF32, causal, {1, 2, 3});
    CheckFlashModelShape(ops, DType::kF16, causal, {2});
    // A sliding window: each row's visible run starts past key 0.
    auto window = [=](int64_t i, int64_t j) {
      return j <= past + i && j + 40 > past + i ? 0.0 : -inf;
    };
    CheckFlashModelShape(ops, DType::kF32, window, {1, 3});
    // Causal plus a distance bias (ALiBi-like): mask values are added, not only -inf.
    auto biased = [=](int64_t i, int64_t j) {
      return j <= past + i ? -0.05 * static_cast<double>(past + i - j) : -inf;
    };
    CheckFlashModelShape(ops, DType::kF32, biased, {1, 2});
    // Some rows causal, some with gaps (not a single run), one fully masked.
    auto mixed = [=](int64_t i, int64_t j) {
      if (i == 1) return -inf;
      if (i % 3 == 0 && j % 7 == 3) return -inf;
      return j <= past + i ? 0.0 : -inf;
    };
    CheckFlashModelShape(ops, DType::kF32, mixed, {1, 2});
    // Keys the window hides from every row hold NaN (stale cache cells): never used, even
    // where whole blocks of K/V are converted at once.
    for (int64_t j = 0; j + 40 <= past; j += 3) ops.Poison(j, std::nan(""));
    CheckFlashModelShape(ops, DType::kF32, window, {1, 2});
  }
}

// Decoding (n_q = 1): keys are split across threads when heads alone cannot keep them busy;
// chunks that see no key (hidden or garbage behind the mask) must merge to the right result.
TEST(CpuKernelsTest, FlashAttnDecodeSplitsKeys) {
  std::mt19937 rng(17);
  const double inf = kInf;
  struct Shape4 {
    int64_t d, n_kv, n_head, n_head_kv;
  };
  for (const Shape4& s : {Shape4{8, 1000, 8, 4}, Shape4{128, 700, 4, 1}, Shape4{48, 777, 2, 2},
                          Shape4{64, 300, 8, 8}}) {
    FlashModelOperands ops(s.d, 1, s.n_kv, s.n_head, s.n_head_kv, DType::kF16);
    ops.Fill(rng);
    CheckFlashModelShape(ops, DType::kF32, [](int64_t, int64_t) { return 0.0; }, {1, 2, 3, 4});
    // Only the last keys visible: the first chunks see nothing; stale cells hold NaN.
    const int64_t first = s.n_kv - 90;
    for (int64_t j = 0; j < first; j += 5) ops.Poison(j, std::nan(""));
    auto tail = [=](int64_t, int64_t j) { return j >= first ? 0.0 : -inf; };
    CheckFlashModelShape(ops, DType::kF32, tail, {2, 3, 4});
    CheckFlashModelShape(ops, DType::kF32, [=](int64_t, int64_t) { return -inf; }, {1, 4});
  }
}

}  // namespace
}  // namespace tg::cpu
