// The CUDA speed paths on a real GPU (label gpu), each against the CPU running the same graph
// on the same inputs: captured decode graphs replayed with new inputs, invalidated by a
// reallocation, reporting index errors; fused kernels bit-equal to the separate ones; the
// tuned matrix-vector kernel, the int8 tile kernel (MMQ) and tensor-core flash attention over
// the shapes they serve; collectives on one device (NCCL with a single rank, both
// peer-to-peer kernels). Every test skips, saying why, where no CUDA device is registered.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_collectives.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_stream.h"
#include "backends/cuda/graph_testing.h"
#include "backends/register_builtin.h"
#include "core/fp16.h"
#include "core/ops.h"
#include "core/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu/device_run.h"
#include "tests/gpu/forced_allreduce.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

using ::testing::HasSubstr;
using ::tg::testing::DeviceRun;
using ::tg::testing::RandomFloats;

double Nmse(const std::vector<float>& got, const std::vector<float>& want) {
  return testing::Nmse(got, std::vector<double>(want.begin(), want.end()));
}

class CudaSpeedGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    absl::StatusOr<Device*> gpu = Registry::Get().FindDevice("CUDA0");
    if (!gpu.ok()) GTEST_SKIP() << "no CUDA device: " << gpu.status();
    gpu_ = dynamic_cast<cuda::CudaDevice*>(*gpu);
    ASSERT_NE(gpu_, nullptr);
    cpu_ = Registry::Get().CpuDevice();
  }

  // The same graph on the GPU and the CPU.
  void Build(const DeviceRun::Builder& build) {
    absl::StatusOr<std::unique_ptr<DeviceRun>> g = DeviceRun::Create(gpu_, build);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<std::unique_ptr<DeviceRun>> c = DeviceRun::Create(cpu_, build);
    ASSERT_TRUE(c.ok()) << c.status();
    gpu_run_ = std::move(*g);
    cpu_run_ = std::move(*c);
  }
  void SetBoth(int leaf, const std::vector<float>& v) {
    ASSERT_TRUE(gpu_run_->Set(leaf, v).ok());
    ASSERT_TRUE(cpu_run_->Set(leaf, v).ok());
  }
  // Runs both and returns the NMSE of the GPU's output `out` against the CPU's.
  double RunBoth(int out = 0) {
    const absl::Status g = gpu_run_->Compute();
    EXPECT_TRUE(g.ok()) << g;
    EXPECT_TRUE(cpu_run_->Compute().ok());
    absl::StatusOr<std::vector<float>> got = gpu_run_->Read(out);
    absl::StatusOr<std::vector<float>> want = cpu_run_->Read(out);
    if (!got.ok() || !want.ok()) return 1e9;
    return Nmse(*got, *want);
  }
  // The decode layer's norm weight and matrices (leafs 2..7).
  void SetDecodeWeights(uint32_t seed) {
    const int64_t sizes[] = {256, 256 * 256, 256 * 256, 256 * 768, 256 * 768, 768 * 256};
    for (int i = 0; i < 6; ++i) SetBoth(2 + i, RandomFloats(sizes[i], seed + i, -0.5f, 0.5f));
  }
  const cuda::GraphCaptureCache::Stats& Captures() {
    return static_cast<cuda::CudaStream*>(gpu_run_->stream())->capture_stats();
  }

  cuda::CudaDevice* gpu_ = nullptr;
  Device* cpu_ = nullptr;
  std::unique_ptr<DeviceRun> gpu_run_, cpu_run_;
};

// A llama-like decode layer over Q4_0 weights: x, pos, norm weight, wq, wk, gate, up, down.
DeviceRun::Builder DecodeLayer(DType type, int64_t n_tokens) {
  return [=](Context& ctx, std::vector<Tensor*>* leafs) {
    cuda::testing::DecodeLayer l =
        cuda::testing::BuildDecodeLayer(ctx, type, 256, 768, n_tokens, 64);
    leafs->push_back(l.x);
    leafs->push_back(l.pos);
    leafs->push_back(l.attn_norm_w);
    // The weights in graph order: wq, wk (the products' first sources), gate, up, down.
    leafs->push_back(l.q_rope->src[0]->view_src->src[0]);
    leafs->push_back(l.k_rope->src[0]->view_src->src[0]);
    leafs->push_back(l.gate->src[0]);
    leafs->push_back(l.up->src[0]);
    leafs->push_back(l.out->src[0]->src[0]);
    return std::vector<Tensor*>{l.out};
  };
}

TEST_F(CudaSpeedGpuTest, CapturedDecodeGraphReplaysWithNewInputs) {
  Build(DecodeLayer(DType::kQ4_0, 1));
  SetDecodeWeights(10);
  for (int step = 0; step < 6; ++step) {
    SetBoth(0, RandomFloats(256, 100 + step));
    SetBoth(1, {static_cast<float>(step * 7)});
    EXPECT_LT(RunBoth(), 1e-5) << "step " << step;
  }
  EXPECT_EQ(Captures().captures, 1);
  EXPECT_EQ(Captures().replays, 4);  // steps 2..5; step 0 warms up, step 1 captures.
}

TEST_F(CudaSpeedGpuTest, ReallocatedBuffersInvalidateTheCapture) {
  Build(DecodeLayer(DType::kQ8_0, 1));
  SetDecodeWeights(20);
  SetBoth(0, RandomFloats(256, 21));
  SetBoth(1, {3});
  for (int i = 0; i < 3; ++i) EXPECT_LT(RunBoth(), 1e-5);
  ASSERT_EQ(Captures().replays, 1);
  ASSERT_TRUE(gpu_run_->Reallocate().ok());  // every tensor moves.
  ASSERT_TRUE(gpu_run_->Set(0, RandomFloats(256, 22)).ok());
  ASSERT_TRUE(cpu_run_->Set(0, RandomFloats(256, 22)).ok());
  ASSERT_TRUE(gpu_run_->Set(1, {5}).ok());
  ASSERT_TRUE(cpu_run_->Set(1, {5}).ok());
  SetDecodeWeights(20);
  EXPECT_LT(RunBoth(), 1e-5);  // would read freed memory if the old capture ran.
  EXPECT_EQ(Captures().invalidations, 1);
  EXPECT_LT(RunBoth(), 1e-5);
  EXPECT_LT(RunBoth(), 1e-5);
  EXPECT_EQ(Captures().captures, 2);
}

TEST_F(CudaSpeedGpuTest, IndexErrorInAReplayIsReportedAtSynchronize) {
  Build([](Context& ctx, std::vector<Tensor*>* leafs) {
    Tensor* table = *ctx.NewTensor(DType::kF32, {64, 10});
    Tensor* idx = *ctx.NewTensor(DType::kI32, {1});
    leafs->push_back(table);
    leafs->push_back(idx);
    return std::vector<Tensor*>{*Scale(ctx, *GetRows(ctx, table, idx), 2.0f)};
  });
  SetBoth(0, RandomFloats(640, 30));
  for (int i = 0; i < 4; ++i) {
    SetBoth(1, {static_cast<float>(i)});
    EXPECT_EQ(RunBoth(), 0.0);
  }
  ASSERT_GE(Captures().replays, 2);
  ASSERT_TRUE(gpu_run_->Set(1, {12}).ok());
  const absl::Status s = gpu_run_->Compute();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("row index 12 out of range [0, 10)"));
  EXPECT_THAT(s.message(), HasSubstr("GET_ROWS"));
  // Reported once; the next replay is clean.
  SetBoth(1, {9});
  EXPECT_EQ(RunBoth(), 0.0);
}

TEST_F(CudaSpeedGpuTest, FusedKernelsEqualTheSeparateOnesBitForBit) {
  // The same layer twice: once as is (norm+mul, rope pair, gate/up+swiglu fused), once with
  // the intermediates read back (outputs cannot be fused).
  for (DType type : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    std::vector<std::vector<float>> results;
    for (bool keep_intermediates : {false, true}) {
      auto build = [=](Context& ctx, std::vector<Tensor*>* leafs) {
        std::vector<Tensor*> out = DecodeLayer(type, 1)(ctx, leafs);
        if (keep_intermediates) {
          Tensor* layer_out = out[0];
          Tensor* swiglu = layer_out->src[0]->src[1];
          out.push_back(swiglu->src[0]);                  // gate.
          out.push_back(swiglu->src[1]);                  // up.
          out.push_back(swiglu->src[0]->src[1]->src[0]);  // the norm.
        }
        return out;
      };
      absl::StatusOr<std::unique_ptr<DeviceRun>> r = DeviceRun::Create(gpu_, build);
      ASSERT_TRUE(r.ok()) << r.status();
      const int64_t sizes[] = {256, 1, 256, 256 * 256, 256 * 256, 256 * 768, 256 * 768, 768 * 256};
      for (int i = 0; i < 8; ++i) ASSERT_TRUE((*r)->Set(i, RandomFloats(sizes[i], 40 + i)).ok());
      ASSERT_TRUE((*r)->Compute().ok());
      results.push_back(*(*r)->Read(0));
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4), 0)
        << DTypeName(type);
  }
}

// MUL_MAT of every weight type, from decode to prompt batches: the matrix-vector kernel
// (1..8 columns, also gate/up fused in the layer test), the int8 tiles (9..512), cuBLAS above.
TEST_F(CudaSpeedGpuTest, MatrixProductsMatchTheCpuOnEveryPath) {
  const DType types[] = {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K,
                         DType::kF16,  DType::kBF16, DType::kF32};
  for (DType type : types) {
    for (int64_t n : {1, 3, 8, 9, 64, 200, 512, 600}) {
      const int64_t k = 2048, m = 333;
      Build([=](Context& ctx, std::vector<Tensor*>* leafs) {
        Tensor* w = *ctx.NewTensor(type, {k, m, 2});
        Tensor* x = *ctx.NewTensor(DType::kF32, {k, n, 2});
        leafs->push_back(w);
        leafs->push_back(x);
        return std::vector<Tensor*>{*MulMat(ctx, w, x)};
      });
      SetBoth(0, RandomFloats(k * m * 2, 50, -1.0f, 1.0f));
      SetBoth(1, RandomFloats(k * n * 2, 51, -1.0f, 1.0f));
      // Quantized weights meet the CPU's activation integers on the int8 paths; cuBLAS rounds
      // activations to F16.
      const double tol = type == DType::kBF16 ? 5e-5 : 1e-4;
      EXPECT_LT(RunBoth(), tol) << DTypeName(type) << " n=" << n;
    }
  }
}

TEST_F(CudaSpeedGpuTest, TensorCoreAttentionMatchesTheCpuAndNeverReadsMaskedSlots) {
  for (int64_t d : {64, 128}) {
    for (int64_t n_q : {32, 100, 512}) {
      const int64_t n_past = 37, n_valid = n_past + n_q, n_kv = (n_valid + 255) / 256 * 256;
      const int64_t n_head = 8, n_head_kv = 2;
      Build([=](Context& ctx, std::vector<Tensor*>* leafs) {
        Tensor* q = *ctx.NewTensor(DType::kF32, {d, n_q, n_head});
        Tensor* k = *ctx.NewTensor(DType::kF16, {d, n_kv, n_head_kv});
        Tensor* v = *ctx.NewTensor(DType::kF16, {d, n_kv, n_head_kv});
        Tensor* mask = *ctx.NewTensor(DType::kF16, {n_kv, n_q});
        for (Tensor* t : {q, k, v, mask}) leafs->push_back(t);
        return std::vector<Tensor*>{*FlashAttn(ctx, q, k, v, mask, 1.0f / std::sqrt(float(d)))};
      });
      SetBoth(0, RandomFloats(d * n_q * n_head, 60));
      SetBoth(1, RandomFloats(d * n_kv * n_head_kv, 61));
      SetBoth(2, RandomFloats(d * n_kv * n_head_kv, 62));
      std::vector<float> mask(n_kv * n_q);
      for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t j = 0; j < n_kv; ++j) mask[i * n_kv + j] = j <= n_past + i ? 0.0f : -INFINITY;
      }
      SetBoth(3, mask);
      // The GPU's padded cache slots hold NaN (the CPU's random values): masked for every
      // query, they must never be read, so both give the same result.
      const std::vector<uint8_t> nan_row(d * 2, 0xff);
      for (int64_t h = 0; h < n_head_kv; ++h) {
        for (int64_t j = n_valid; j < n_kv; ++j) {
          for (int leaf : {1, 2}) {
            ASSERT_TRUE(gpu_run_->SetBytes(leaf, (h * n_kv + j) * d * 2, nan_row).ok());
          }
        }
      }
      const double nmse = RunBoth();
      EXPECT_LT(nmse, 5e-4) << "d=" << d << " n_q=" << n_q;  // tg-ops' F16 attention bound.
      EXPECT_FALSE(std::isnan(nmse));
    }
  }
}

TEST_F(CudaSpeedGpuTest, CollectivesOnOneDeviceAreTheIdentity) {
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {5000});
  std::unique_ptr<Buffer> buf = *gpu_->default_buffer_type()->Allocate(t->NumBytes());
  ASSERT_TRUE(PlaceTensor(buf.get(), t, 0).ok());
  const std::vector<float> v = RandomFloats(5000, 70, -3.0f, 3.0f);
  cuda::CudaCollectives collectives;
  Device* devices[] = {gpu_};
  using Algo = cuda::AllReduceAlgorithm;
  for (Algo algo : {Algo::kOneShot, Algo::kTwoShot, Algo::kNccl}) {
    for (bool bf16 : {false, true}) {
      absl::StatusOr<std::unique_ptr<cuda::CudaCommunicator>> comm =
          collectives.InitWith(devices, testing::ForcedAllReduce(algo, bf16));
      if (algo == Algo::kNccl && !comm.ok()) {
        // NCCL itself is tested with one rank where it is installed (gpu-check.sh finds it).
        std::printf("NCCL not testable here: %s\n", comm.status().ToString().c_str());
        continue;
      }
      ASSERT_TRUE(comm.ok()) << comm.status();
      ASSERT_TRUE(t->buffer->SetTensor(t, v.data(), 0, v.size() * 4).ok());
      Tensor* ts[] = {t};
      ASSERT_TRUE((*comm)->AllReduce(ts).ok()) << cuda::AllReduceAlgorithmName(algo);
      std::vector<float> got(v.size());
      ASSERT_TRUE(t->buffer->GetTensor(t, got.data(), 0, got.size() * 4).ok());
      for (size_t i = 0; i < v.size(); ++i) {
        const float want = bf16 ? BF16ToFloat(FloatToBF16(v[i])) : v[i];
        ASSERT_EQ(got[i], want) << cuda::AllReduceAlgorithmName(algo) << " bf16=" << bf16 << " "
                                << i;
      }
    }
  }
}

}  // namespace
}  // namespace tg
