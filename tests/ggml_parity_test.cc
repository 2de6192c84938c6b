// Bit-exact parity of core/quants.cc with ggml itself: loads the peer's prebuilt
// libggml-base.so (see ../shared/peer/llama-cpp-peer.sh) with dlopen and compares quantized
// bytes, dequantized floats and f16/bf16 conversions. Skips when the library is absent.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quants.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

using QuantizeFn = void (*)(const float* x, void* y, int64_t k);
using DequantizeFn = void (*)(const void* x, float* y, int64_t k);
using ToHalfFn = void (*)(const float* x, uint16_t* y, int64_t n);
using FromHalfFn = void (*)(const uint16_t* x, float* y, int64_t n);

struct DlCloser {
  void operator()(void* handle) const {
    if (handle != nullptr) dlclose(handle);
  }
};
using DlHandle = std::unique_ptr<void, DlCloser>;

std::string PeerLibPath() {
  const char* peer = std::getenv("PEER_DIR");
  const char* home = std::getenv("HOME");
  const std::string dir =
      peer != nullptr ? std::string(peer)
                      : std::string(home != nullptr ? home : "") + "/.cache/tensorgrid-peer";
  return dir + "/linux-x64/package/bins/linux-x64/libggml-base.so";
}

// The ggml entry points under test, resolved once per process.
struct Ggml {
  DlHandle handle;
  std::string error;  // why the library is unusable; empty when it loaded.
  QuantizeFn quantize_q4_0 = nullptr, quantize_q8_0 = nullptr, quantize_q4_K = nullptr,
             quantize_q6_K = nullptr, quantize_q8_K = nullptr, quantize_q5_0 = nullptr,
             quantize_q5_1 = nullptr, quantize_q2_K = nullptr, quantize_q3_K = nullptr,
             quantize_q5_K = nullptr, quantize_iq4_nl = nullptr, quantize_iq4_xs = nullptr,
             quantize_mxfp4 = nullptr;
  DequantizeFn dequantize_q4_0 = nullptr, dequantize_q8_0 = nullptr, dequantize_q4_K = nullptr,
               dequantize_q6_K = nullptr, dequantize_q8_K = nullptr, dequantize_q5_0 = nullptr,
               dequantize_q5_1 = nullptr, dequantize_q2_K = nullptr, dequantize_q3_K = nullptr,
               dequantize_q5_K = nullptr, dequantize_iq4_nl = nullptr, dequantize_iq4_xs = nullptr,
               dequantize_mxfp4 = nullptr;
  ToHalfFn fp32_to_fp16 = nullptr;
  FromHalfFn fp16_to_fp32 = nullptr;
  ToHalfFn fp32_to_bf16 = nullptr;      // optional exports.
  ToHalfFn fp32_to_bf16_ref = nullptr;  // optional.
  FromHalfFn bf16_to_fp32 = nullptr;    // optional.
};

template <typename Fn>
bool Resolve(Ggml& g, const char* name, Fn* fn, bool required = true) {
  *fn = reinterpret_cast<Fn>(dlsym(g.handle.get(), name));
  if (*fn == nullptr && required && g.error.empty())
    g.error = std::string("missing symbol ") + name;
  return *fn != nullptr;
}

Ggml OpenGgml() {
  Ggml g;
  const std::string path = PeerLibPath();
  g.handle.reset(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!g.handle) {
    const char* why = dlerror();
    g.error = "cannot load " + path + " (" + (why ? why : "?") +
              "); set it up with `bash ../shared/peer/llama-cpp-peer.sh setup` or point "
              "PEER_DIR at an existing peer directory";
    return g;
  }
  Resolve(g, "quantize_row_q4_0_ref", &g.quantize_q4_0);
  Resolve(g, "quantize_row_q8_0_ref", &g.quantize_q8_0);
  Resolve(g, "quantize_row_q4_K_ref", &g.quantize_q4_K);
  Resolve(g, "quantize_row_q6_K_ref", &g.quantize_q6_K);
  Resolve(g, "quantize_row_q8_K_ref", &g.quantize_q8_K);
  Resolve(g, "dequantize_row_q4_0", &g.dequantize_q4_0);
  Resolve(g, "dequantize_row_q8_0", &g.dequantize_q8_0);
  Resolve(g, "dequantize_row_q4_K", &g.dequantize_q4_K);
  Resolve(g, "dequantize_row_q6_K", &g.dequantize_q6_K);
  Resolve(g, "dequantize_row_q8_K", &g.dequantize_q8_K);
  Resolve(g, "quantize_row_q5_0_ref", &g.quantize_q5_0);
  Resolve(g, "quantize_row_q5_1_ref", &g.quantize_q5_1);
  Resolve(g, "quantize_row_q2_K_ref", &g.quantize_q2_K);
  Resolve(g, "quantize_row_q3_K_ref", &g.quantize_q3_K);
  Resolve(g, "quantize_row_q5_K_ref", &g.quantize_q5_K);
  Resolve(g, "quantize_row_iq4_nl_ref", &g.quantize_iq4_nl);
  Resolve(g, "quantize_row_iq4_xs_ref", &g.quantize_iq4_xs);
  Resolve(g, "quantize_row_mxfp4_ref", &g.quantize_mxfp4);
  Resolve(g, "dequantize_row_q5_0", &g.dequantize_q5_0);
  Resolve(g, "dequantize_row_q5_1", &g.dequantize_q5_1);
  Resolve(g, "dequantize_row_q2_K", &g.dequantize_q2_K);
  Resolve(g, "dequantize_row_q3_K", &g.dequantize_q3_K);
  Resolve(g, "dequantize_row_q5_K", &g.dequantize_q5_K);
  Resolve(g, "dequantize_row_iq4_nl", &g.dequantize_iq4_nl);
  Resolve(g, "dequantize_row_iq4_xs", &g.dequantize_iq4_xs);
  Resolve(g, "dequantize_row_mxfp4", &g.dequantize_mxfp4);
  Resolve(g, "ggml_fp32_to_fp16_row", &g.fp32_to_fp16);
  Resolve(g, "ggml_fp16_to_fp32_row", &g.fp16_to_fp32);
  Resolve(g, "ggml_fp32_to_bf16_row", &g.fp32_to_bf16, /*required=*/false);
  Resolve(g, "ggml_fp32_to_bf16_row_ref", &g.fp32_to_bf16_ref, /*required=*/false);
  Resolve(g, "ggml_bf16_to_fp32_row", &g.bf16_to_fp32, /*required=*/false);
  return g;
}

// Loaded once per process; the handle is closed at exit.
const Ggml& LoadGgml() {
  static const Ggml ggml = OpenGgml();
  return ggml;
}

class GgmlParityTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!ggml().error.empty()) GTEST_SKIP() << "ggml peer unavailable: " << ggml().error;
  }
  static const Ggml& ggml() { return LoadGgml(); }
};

// ---------------------------------------------------------------------------------------------
// Test rows: one generator per edge case; each fills a row of n floats.

using RowGen = std::function<void(std::mt19937&, std::vector<float>&)>;

struct RowKind {
  const char* name;
  RowGen fill;
};

float Denormal(std::mt19937& rng) {
  const uint32_t bits = std::uniform_int_distribution<uint32_t>(1, 0x007fffff)(rng);
  return (rng() & 1) ? BitsFloat(bits) : -BitsFloat(bits);
}

std::vector<RowKind> RowKinds() {
  auto gauss = [](float sigma) {
    return [sigma](std::mt19937& rng, std::vector<float>& x) {
      std::normal_distribution<float> dist(0.0f, sigma);
      for (float& v : x) v = dist(rng);
    };
  };
  std::vector<RowKind> kinds = {
      {"gauss_1", gauss(1.0f)},
      {"gauss_1e-3", gauss(1e-3f)},
      {"gauss_1e3", gauss(1e3f)},
      {"gauss_1e-30", gauss(1e-30f)},
      {"gauss_1e-20", gauss(1e-20f)},
      {"uniform_pos",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::uniform_real_distribution<float> dist(0.5f, 2.0f);
         for (float& v : x) v = dist(rng);  // min > 0 exercises the clamped offset of Q4_K.
       }},
      {"uniform_neg",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::uniform_real_distribution<float> dist(-3.0f, -0.1f);
         for (float& v : x) v = dist(rng);
       }},
      {"negative_dominant",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::normal_distribution<float> dist(0.0f, 1.0f);
         for (size_t i = 0; i < x.size(); ++i) x[i] = i % 16 == 3 ? -8.0f : dist(rng);
       }},
      {"opposite_equal_max",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::normal_distribution<float> dist(0.0f, 1.0f);
         for (size_t i = 0; i < x.size(); ++i)
           x[i] = i % 32 == 1 ? -5.0f : i % 32 == 7 ? 5.0f : dist(rng);
       }},
      {"zeros", [](std::mt19937&, std::vector<float>& x) { std::fill(x.begin(), x.end(), 0.0f); }},
      {"neg_zeros",
       [](std::mt19937&, std::vector<float>& x) { std::fill(x.begin(), x.end(), -0.0f); }},
      {"constant",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::fill(x.begin(), x.end(), std::uniform_real_distribution<float>(-4, 4)(rng));
       }},
      {"outlier",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::normal_distribution<float> dist(0.0f, 1.0f);
         for (float& v : x) v = dist(rng);
         x[rng() % x.size()] = (rng() & 1) ? 1e4f : -1e4f;
       }},
      {"sparse",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::normal_distribution<float> dist(0.0f, 1.0f);
         for (float& v : x) v = rng() % 13 == 0 ? dist(rng) : 0.0f;  // many all-zero groups.
       }},
      {"mixed_scales",
       [](std::mt19937& rng, std::vector<float>& x) {
         // Groups of 16 with wildly different magnitudes: small groups get scale 0 in K-quants.
         std::normal_distribution<float> dist(0.0f, 1.0f);
         for (size_t i = 0; i < x.size(); ++i)
           x[i] = dist(rng) * std::pow(10.0f, float((i / 16) % 7) - 4);
       }},
      {"denormal",
       [](std::mt19937& rng, std::vector<float>& x) {
         for (float& v : x) v = Denormal(rng);
       }},
      {"denormal_mixed",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::normal_distribution<float> dist(0.0f, 1e-37f);
         for (float& v : x) v = rng() % 2 ? Denormal(rng) : dist(rng);
       }},
      {"integers",
       [](std::mt19937& rng, std::vector<float>& x) {
         for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 33) - 16);
       }},
      {"half_ties",
       [](std::mt19937& rng, std::vector<float>& x) {
         // Values on exact .5 boundaries after scaling (amax 127 / 8 / 63.5 ...).
         for (float& v : x) v = 0.5f * static_cast<float>(static_cast<int>(rng() % 255) - 127);
       }},
      {"huge",
       [](std::mt19937& rng, std::vector<float>& x) {
         std::normal_distribution<float> dist(0.0f, 1e7f);  // f16 scales overflow to inf.
         for (float& v : x) v = dist(rng);
       }},
  };
  return kinds;
}

// ---------------------------------------------------------------------------------------------
// Quantized formats

struct QuantCase {
  const char* name;
  int64_t block_size;
  size_t block_bytes;
  QuantizeFn ours_quantize;
  DequantizeFn ours_dequantize;
  QuantizeFn Ggml::*ggml_quantize;
  DequantizeFn Ggml::*ggml_dequantize;
  // Whether a block's bytes are fully determined by ggml. quantize_row_iq4_nl_ref leaves the
  // quants of a block below GROUP_MAX_EPS (scale 0) as whatever its level buffer held before
  // (stack garbage, or the previous block's), so there only the scale can be compared.
  bool (*determined)(const uint8_t* ggml_block) = nullptr;
};

bool IQ4NLBlockDetermined(const uint8_t* block) {
  uint16_t d;
  std::memcpy(&d, block + offsetof(BlockIQ4_NL, d), sizeof(d));
  return (d & 0x7FFF) != 0;
}

template <typename Block, void (*kFn)(const float*, Block*, int64_t)>
void OursQuantize(const float* x, void* y, int64_t n) {
  kFn(x, static_cast<Block*>(y), n);
}
template <typename Block, void (*kFn)(const Block*, float*, int64_t)>
void OursDequantize(const void* x, float* y, int64_t n) {
  kFn(static_cast<const Block*>(x), y, n);
}

const QuantCase kQuantCases[] = {
    {"q4_0", kQK4_0, sizeof(BlockQ4_0), OursQuantize<BlockQ4_0, QuantizeRowQ4_0>,
     OursDequantize<BlockQ4_0, DequantizeRowQ4_0>, &Ggml::quantize_q4_0, &Ggml::dequantize_q4_0},
    {"q8_0", kQK8_0, sizeof(BlockQ8_0), OursQuantize<BlockQ8_0, QuantizeRowQ8_0>,
     OursDequantize<BlockQ8_0, DequantizeRowQ8_0>, &Ggml::quantize_q8_0, &Ggml::dequantize_q8_0},
    {"q4_K", kQK_K, sizeof(BlockQ4_K), OursQuantize<BlockQ4_K, QuantizeRowQ4_K>,
     OursDequantize<BlockQ4_K, DequantizeRowQ4_K>, &Ggml::quantize_q4_K, &Ggml::dequantize_q4_K},
    {"q6_K", kQK_K, sizeof(BlockQ6_K), OursQuantize<BlockQ6_K, QuantizeRowQ6_K>,
     OursDequantize<BlockQ6_K, DequantizeRowQ6_K>, &Ggml::quantize_q6_K, &Ggml::dequantize_q6_K},
    {"q8_K", kQK_K, sizeof(BlockQ8_K), OursQuantize<BlockQ8_K, QuantizeRowQ8_K>,
     OursDequantize<BlockQ8_K, DequantizeRowQ8_K>, &Ggml::quantize_q8_K, &Ggml::dequantize_q8_K},
    {"q5_0", kQK5_0, sizeof(BlockQ5_0), OursQuantize<BlockQ5_0, QuantizeRowQ5_0>,
     OursDequantize<BlockQ5_0, DequantizeRowQ5_0>, &Ggml::quantize_q5_0, &Ggml::dequantize_q5_0},
    {"q5_1", kQK5_1, sizeof(BlockQ5_1), OursQuantize<BlockQ5_1, QuantizeRowQ5_1>,
     OursDequantize<BlockQ5_1, DequantizeRowQ5_1>, &Ggml::quantize_q5_1, &Ggml::dequantize_q5_1},
    {"q2_K", kQK_K, sizeof(BlockQ2_K), OursQuantize<BlockQ2_K, QuantizeRowQ2_K>,
     OursDequantize<BlockQ2_K, DequantizeRowQ2_K>, &Ggml::quantize_q2_K, &Ggml::dequantize_q2_K},
    {"q3_K", kQK_K, sizeof(BlockQ3_K), OursQuantize<BlockQ3_K, QuantizeRowQ3_K>,
     OursDequantize<BlockQ3_K, DequantizeRowQ3_K>, &Ggml::quantize_q3_K, &Ggml::dequantize_q3_K},
    {"q5_K", kQK_K, sizeof(BlockQ5_K), OursQuantize<BlockQ5_K, QuantizeRowQ5_K>,
     OursDequantize<BlockQ5_K, DequantizeRowQ5_K>, &Ggml::quantize_q5_K, &Ggml::dequantize_q5_K},
    {"iq4_nl", kQK4_NL, sizeof(BlockIQ4_NL), OursQuantize<BlockIQ4_NL, QuantizeRowIQ4_NL>,
     OursDequantize<BlockIQ4_NL, DequantizeRowIQ4_NL>, &Ggml::quantize_iq4_nl,
     &Ggml::dequantize_iq4_nl, IQ4NLBlockDetermined},
    {"iq4_xs", kQK_K, sizeof(BlockIQ4_XS), OursQuantize<BlockIQ4_XS, QuantizeRowIQ4_XS>,
     OursDequantize<BlockIQ4_XS, DequantizeRowIQ4_XS>, &Ggml::quantize_iq4_xs,
     &Ggml::dequantize_iq4_xs},
    {"mxfp4", kQKMXFP4, sizeof(BlockMXFP4), OursQuantize<BlockMXFP4, QuantizeRowMXFP4>,
     OursDequantize<BlockMXFP4, DequantizeRowMXFP4>, &Ggml::quantize_mxfp4,
     &Ggml::dequantize_mxfp4},
};

// Names the case in gtest output instead of dumping its bytes.
void PrintTo(const QuantCase& qc, std::ostream* os) { *os << qc.name; }

class QuantParityTest : public GgmlParityTest, public testing::WithParamInterface<QuantCase> {};

// Index of the first differing block (ours, ggml's), or -1. Where ggml leaves a block's
// bytes partly undetermined, the block must still dequantize to the same values (zeros,
// whose sign follows the undetermined level).
int64_t FirstDiffBlock(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                       const QuantCase& qc) {
  const size_t bb = qc.block_bytes;
  for (size_t i = 0; i < a.size(); i += bb) {
    if (std::memcmp(a.data() + i, b.data() + i, bb) == 0) continue;
    if (qc.determined != nullptr && !qc.determined(b.data() + i)) {
      std::vector<float> fa(qc.block_size), fb(qc.block_size);
      qc.ours_dequantize(a.data() + i, fa.data(), qc.block_size);
      qc.ours_dequantize(b.data() + i, fb.data(), qc.block_size);
      if (fa == fb) continue;  // element-wise ==: -0 equals +0.
    }
    return i / bb;
  }
  return -1;
}

TEST_P(QuantParityTest, QuantizeAndDequantizeAreBitExact) {
  const QuantCase& qc = GetParam();
  const QuantizeFn ggml_quantize = ggml().*qc.ggml_quantize;
  const DequantizeFn ggml_dequantize = ggml().*qc.ggml_dequantize;
  constexpr int kRowsPerKind = 200;
  const int64_t n = 4 * kQK_K;  // a multiple of every block size.
  int64_t blocks = 0;
  std::vector<float> x(n), ours_f(n), ggml_f(n);
  std::vector<uint8_t> ours_q(n / qc.block_size * qc.block_bytes);
  std::vector<uint8_t> ggml_q(ours_q.size());
  for (const RowKind& kind : RowKinds()) {
    std::mt19937 rng(1234);
    for (int r = 0; r < kRowsPerKind; ++r) {
      kind.fill(rng, x);
      // Zero-filled so that bytes ggml leaves untouched (Q8_K bsums of zero blocks) compare.
      std::fill(ours_q.begin(), ours_q.end(), 0);
      std::fill(ggml_q.begin(), ggml_q.end(), 0);
      qc.ours_quantize(x.data(), ours_q.data(), n);
      ggml_quantize(x.data(), ggml_q.data(), n);
      const int64_t bad = FirstDiffBlock(ours_q, ggml_q, qc);
      ASSERT_EQ(bad, -1) << qc.name << " quantized bytes differ: kind " << kind.name << " row " << r
                         << " block " << bad;
      qc.ours_dequantize(ggml_q.data(), ours_f.data(), n);
      ggml_dequantize(ggml_q.data(), ggml_f.data(), n);
      ASSERT_EQ(std::memcmp(ours_f.data(), ggml_f.data(), n * sizeof(float)), 0)
          << qc.name << " dequantized floats differ: kind " << kind.name << " row " << r;
      blocks += n / qc.block_size;
    }
  }
  std::printf("[ %s ] %lld blocks quantized and dequantized bit-identically\n", qc.name,
              static_cast<long long>(blocks));
}

// Sets every f16 scale field of random blocks to a finite half, so that dequantization
// compares numbers rather than NaN payload propagation.
uint16_t RandomFiniteHalf(std::mt19937& rng) {
  uint16_t h;
  do {
    h = static_cast<uint16_t>(rng());
  } while ((h & 0x7C00u) == 0x7C00u);
  return h;
}

void SanitizeScales(const char* name, uint8_t* block, std::mt19937& rng) {
  auto set_half = [&](size_t offset) {
    const uint16_t h = RandomFiniteHalf(rng);
    std::memcpy(block + offset, &h, 2);
  };
  const std::string type = name;
  if (type == "q4_0" || type == "q8_0" || type == "q5_0" || type == "iq4_nl") {
    set_half(0);
  } else if (type == "q5_1") {
    set_half(offsetof(BlockQ5_1, d));
    set_half(offsetof(BlockQ5_1, m));
  } else if (type == "q2_K") {
    set_half(offsetof(BlockQ2_K, d));
    set_half(offsetof(BlockQ2_K, dmin));
  } else if (type == "q3_K") {
    set_half(offsetof(BlockQ3_K, d));
  } else if (type == "q5_K") {
    set_half(offsetof(BlockQ5_K, d));
    set_half(offsetof(BlockQ5_K, dmin));
  } else if (type == "iq4_xs") {
    set_half(offsetof(BlockIQ4_XS, d));
  } else if (type == "q4_K") {
    set_half(offsetof(BlockQ4_K, d));
    set_half(offsetof(BlockQ4_K, dmin));
  } else if (type == "q6_K") {
    set_half(offsetof(BlockQ6_K, d));
  } else if (type == "q8_K") {
    const float d = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    std::memcpy(block + offsetof(BlockQ8_K, d), &d, 4);
  }
}

TEST_P(QuantParityTest, DequantizeOfRandomBytesIsBitExact) {
  const QuantCase& qc = GetParam();
  constexpr int64_t kBlocks = 4096;
  const int64_t n = kBlocks * qc.block_size;
  std::mt19937 rng(99);
  std::vector<uint8_t> q(kBlocks * qc.block_bytes);
  for (uint8_t& b : q) b = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < kBlocks; ++b) SanitizeScales(qc.name, q.data() + b * qc.block_bytes, rng);
  std::vector<float> ours(n), theirs(n);
  qc.ours_dequantize(q.data(), ours.data(), n);
  (ggml().*qc.ggml_dequantize)(q.data(), theirs.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(FloatBits(ours[i]), FloatBits(theirs[i]))
        << qc.name << " element " << i << " of block " << i / qc.block_size;
  }
  std::printf("[ %s ] %lld random blocks dequantized bit-identically\n", qc.name,
              static_cast<long long>(kBlocks));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantParityTest, testing::ValuesIn(kQuantCases),
                         [](const testing::TestParamInfo<QuantCase>& info) {
                           return std::string(info.param.name);
                         });

// ---------------------------------------------------------------------------------------------
// f16 / bf16

// Every 16-bit pattern, in order.
std::vector<uint16_t> AllHalves() {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  return h;
}

// Floats that stress a conversion to 16 bits whose value of bit pattern h is `to_float(h)`:
// every representable value, the exact midpoints (ties) between neighbours and one float ulp
// either side of them, specials, NaNs with payloads, denormals, and random bit patterns.
std::vector<float> ConversionInputs(float (*to_float)(uint16_t)) {
  std::vector<float> v;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = to_float(static_cast<uint16_t>(h));
    const float b = to_float(static_cast<uint16_t>(h + 1));
    v.push_back(a);
    if (!std::isfinite(a) || !std::isfinite(b) || std::signbit(a) != std::signbit(b)) continue;
    const float mid = a + (b - a) / 2;  // exact: both are on a coarser grid than f32.
    v.push_back(mid);
    v.push_back(std::nextafter(mid, 0.0f));
    v.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity() * (a < 0 ? -1 : 1)));
  }
  const float kInf = std::numeric_limits<float>::infinity();
  for (float s : {1.0f, -1.0f}) {
    for (float f : {0.0f, kInf, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, 3.4e38f,
                    6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 1e-45f,
                    1.1754942e-38f, 1.17549435e-38f}) {
      v.push_back(s * f);
    }
  }
  for (uint32_t bits : {0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x7FA00000u, 0x7F802000u,
                        0xFF800001u, 0xFFC00001u, 0xFFFFFFFFu, 0x7FBFFFFFu, 0x7F8000FFu}) {
    v.push_back(BitsFloat(bits));
  }
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 21); ++i) v.push_back(BitsFloat(static_cast<uint32_t>(rng())));
  return v;
}

void ExpectSameBits16(const std::vector<float>& in, const std::vector<uint16_t>& ours,
                      const std::vector<uint16_t>& theirs, const char* what) {
  int64_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (ours[i] == theirs[i]) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << what << " of 0x" << std::hex << FloatBits(in[i]) << ": ours 0x" << ours[i]
                    << ", ggml 0x" << theirs[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

void ExpectSameBits32(const std::vector<float>& ours, const std::vector<float>& theirs,
                      const char* what) {
  int64_t mismatches = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    if (FloatBits(ours[i]) == FloatBits(theirs[i])) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << what << " of pattern 0x" << std::hex << i << ": ours 0x"
                    << FloatBits(ours[i]) << ", ggml 0x" << FloatBits(theirs[i]);
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

TEST_F(GgmlParityTest, HalfToFloatAllPatterns) {
  const std::vector<uint16_t> h = AllHalves();
  std::vector<float> ours(h.size()), theirs(h.size());
  DequantizeRow(DType::kF16, h.data(), ours.data(), h.size());
  ggml().fp16_to_fp32(h.data(), theirs.data(), h.size());
  ExpectSameBits32(ours, theirs, "f16->f32");
  std::printf("[ f16 ] %zu halves converted to f32 bit-identically\n", h.size());
}

TEST_F(GgmlParityTest, FloatToHalf) {
  const std::vector<float> in = ConversionInputs(HalfToFloat);
  std::vector<uint16_t> ours(in.size()), theirs(in.size());
  QuantizeRow(DType::kF16, in.data(), ours.data(), in.size());
  ggml().fp32_to_fp16(in.data(), theirs.data(), in.size());
  ExpectSameBits16(in, ours, theirs, "f32->f16");
  std::printf("[ f16 ] %zu floats converted to f16 bit-identically\n", in.size());
}

TEST_F(GgmlParityTest, BF16ToFloatAllPatterns) {
  if (ggml().bf16_to_fp32 == nullptr) GTEST_SKIP() << "ggml_bf16_to_fp32_row not exported";
  const std::vector<uint16_t> h = AllHalves();
  std::vector<float> ours(h.size()), theirs(h.size());
  DequantizeRow(DType::kBF16, h.data(), ours.data(), h.size());
  ggml().bf16_to_fp32(h.data(), theirs.data(), h.size());
  ExpectSameBits32(ours, theirs, "bf16->f32");
  std::printf("[ bf16 ] %zu bf16 values converted to f32 bit-identically\n", h.size());
}

TEST_F(GgmlParityTest, FloatToBF16) {
  if (ggml().fp32_to_bf16 == nullptr && ggml().fp32_to_bf16_ref == nullptr) {
    GTEST_SKIP() << "ggml_fp32_to_bf16_row(_ref) not exported";
  }
  const std::vector<float> in = ConversionInputs(BF16ToFloat);
  std::vector<uint16_t> ours(in.size()), theirs(in.size());
  QuantizeRow(DType::kBF16, in.data(), ours.data(), in.size());
  for (ToHalfFn fn : {ggml().fp32_to_bf16, ggml().fp32_to_bf16_ref}) {
    if (fn == nullptr) continue;
    fn(in.data(), theirs.data(), in.size());
    ExpectSameBits16(in, ours, theirs, "f32->bf16");
  }
  std::printf("[ bf16 ] %zu floats converted to bf16 bit-identically\n", in.size());
}

}  // namespace
}  // namespace tg
