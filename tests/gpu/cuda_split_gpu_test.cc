// One GPU split into two CUDA devices (run with TG_CUDA_DEVICES=2; label gpu): the slices'
// memory shares, the peer-to-peer all-reduce between them (every algorithm and wire type,
// tensors larger than the staging buffers), its ordering after the producing compute and
// before the consuming one without host synchronization, and out of memory in the middle
// of a graph as a clear error. Skips, saying why, without two slices of one GPU.
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/allreduce_plan.h"
#include "backends/cuda/cuda_collectives.h"
#include "backends/cuda/cuda_device.h"
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

constexpr size_t kMiB = size_t{1} << 20;

class CudaSplitGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    absl::StatusOr<Device*> a = Registry::Get().FindDevice("CUDA0");
    absl::StatusOr<Device*> b = Registry::Get().FindDevice("CUDA1");
    if (!a.ok() || !b.ok()) GTEST_SKIP() << "needs CUDA0 and CUDA1 (TG_CUDA_DEVICES=2)";
    d0_ = dynamic_cast<cuda::CudaDevice*>(*a);
    d1_ = dynamic_cast<cuda::CudaDevice*>(*b);
    ASSERT_NE(d0_, nullptr);
    ASSERT_NE(d1_, nullptr);
    if (d0_->index() != d1_->index()) GTEST_SKIP() << "CUDA0 and CUDA1 are two GPUs, not slices";
  }

  // A tensor of n floats in device d's memory, holding v.
  Tensor* OnDevice(cuda::CudaDevice* d, const std::vector<float>& v) {
    Tensor* t = *ctx_.NewTensor(DType::kF32, {static_cast<int64_t>(v.size())});
    buffers_.push_back(*d->default_buffer_type()->Allocate(t->NumBytes()));
    EXPECT_TRUE(PlaceTensor(buffers_.back().get(), t, 0).ok());
    EXPECT_TRUE(t->buffer->SetTensor(t, v.data(), 0, v.size() * 4).ok());
    return t;
  }
  std::vector<float> Read(const Tensor* t) {
    std::vector<float> out(t->NumElements());
    EXPECT_TRUE(t->buffer->GetTensor(t, out.data(), 0, out.size() * 4).ok());
    return out;
  }

  cuda::CudaDevice* d0_ = nullptr;
  cuda::CudaDevice* d1_ = nullptr;
  Context ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

TEST_F(CudaSplitGpuTest, SlicesShareOneGpuWithAShareOfItsMemoryEach) {
  EXPECT_TRUE(absl::EndsWith(d0_->id(), "/v0")) << d0_->id();
  EXPECT_TRUE(absl::EndsWith(d1_->id(), "/v1")) << d1_->id();
  EXPECT_THAT(std::string(d1_->description()), HasSubstr("slice 2 of 2"));
  const size_t share = d0_->gpu().memory_share;
  EXPECT_EQ(share, d0_->gpu().gpu.total_memory / 2);
  EXPECT_EQ(d0_->memory().total, share);
  EXPECT_LE(d0_->memory().free, share);
  absl::StatusOr<std::unique_ptr<Buffer>> too_big =
      d0_->default_buffer_type()->Allocate(share + 64 * kMiB);
  ASSERT_FALSE(too_big.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(too_big.status())) << too_big.status();
  EXPECT_THAT(too_big.status().message(), HasSubstr("TG_CUDA_DEVICES"));
  // A slice's allocation counts against its own share only.
  std::unique_ptr<Buffer> big = *d0_->default_buffer_type()->Allocate(512 * kMiB);
  EXPECT_EQ(d0_->share().used(), 512 * kMiB);
  EXPECT_EQ(d1_->share().used(), 0u);
  EXPECT_LE(d0_->memory().free, share - 512 * kMiB);
  big.reset();
  EXPECT_EQ(d0_->share().used(), 0u);
}

TEST_F(CudaSplitGpuTest, AllReduceSumsInRankOrderOnEveryPath) {
  cuda::CudaCollectives collectives;
  Device* devices[] = {d0_, d1_};
  using Algo = cuda::AllReduceAlgorithm;
  for (size_t n : {size_t{1}, size_t{4099}, cuda::kStagingElements + 123}) {
    const std::vector<float> a = RandomFloats(n, 80, -2.0f, 2.0f),
                             b = RandomFloats(n, 81, -2.0f, 2.0f);
    for (Algo algo : {Algo::kOneShot, Algo::kTwoShot}) {
      for (bool bf16 : {false, true}) {
        absl::StatusOr<std::unique_ptr<cuda::CudaCommunicator>> comm =
            collectives.InitWith(devices, testing::ForcedAllReduce(algo, bf16));
        ASSERT_TRUE(comm.ok()) << comm.status();
        EXPECT_FALSE((*comm)->topology().nccl);  // one GPU: NCCL would refuse.
        Tensor* ta = OnDevice(d0_, a);
        Tensor* tb = OnDevice(d1_, b);
        Tensor* ts[] = {ta, tb};
        ASSERT_TRUE((*comm)->AllReduce(ts).ok());
        const std::vector<float> ra = Read(ta), rb = Read(tb);
        for (size_t i = 0; i < n; ++i) {
          auto wire = [&](float x) { return bf16 ? BF16ToFloat(FloatToBF16(x)) : x; };
          float want = wire(a[i]) + wire(b[i]);
          if (algo == Algo::kTwoShot) want = wire(want);  // the reduced chunk crosses too.
          ASSERT_EQ(ra[i], rb[i]) << "ranks differ at " << i;
          ASSERT_EQ(ra[i], want) << cuda::AllReduceAlgorithmName(algo) << " bf16=" << bf16
                                 << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

// No host synchronization between the producing graphs, the all-reduce and the consuming
// graphs: the legacy-stream ordering must make the result right anyway.
TEST_F(CudaSplitGpuTest, AllReduceOrdersAfterProducersAndBeforeConsumers) {
  constexpr int64_t kN = 1 << 24;  // long kernels: an unordered read would race.
  cuda::CudaDevice* devs[] = {d0_, d1_};
  std::vector<std::unique_ptr<DeviceRun>> produce, consume;
  for (cuda::CudaDevice* d : devs) {
    produce.push_back(*DeviceRun::Create(d, [](Context& ctx, std::vector<Tensor*>* leafs) {
      Tensor* x = *ctx.NewTensor(DType::kF32, {kN});
      leafs->push_back(x);
      Tensor* y = *Scale(ctx, *Scale(ctx, x, 3.0f), 1.0f);
      return std::vector<Tensor*>{y};
    }));
  }
  const std::vector<float> x0(kN, 1.0f), x1(kN, 2.0f);
  ASSERT_TRUE(produce[0]->Set(0, x0).ok());
  ASSERT_TRUE(produce[1]->Set(0, x1).ok());
  Tensor* y[] = {produce[0]->output(0), produce[1]->output(0)};
  for (int r = 0; r < 2; ++r) {
    Tensor* yr = y[r];
    consume.push_back(*DeviceRun::Create(devs[r], [yr](Context& ctx, std::vector<Tensor*>* leafs) {
      Tensor* in = *ctx.NewTensor(DType::kF32, {kN});
      leafs->push_back(in);
      return std::vector<Tensor*>{*Scale(ctx, in, 0.5f)};
    }));
    // The consumer reads the all-reduced tensor itself.
    Tensor* in = consume.back()->leaf(0);
    in->data = yr->data;
    in->buffer = yr->buffer;
  }
  cuda::CudaCollectives collectives;
  Device* devices[] = {d0_, d1_};
  for (auto algo : {cuda::AllReduceAlgorithm::kOneShot, cuda::AllReduceAlgorithm::kTwoShot}) {
    std::unique_ptr<cuda::CudaCommunicator> comm =
        *collectives.InitWith(devices, testing::ForcedAllReduce(algo, /*bf16=*/false));
    for (int r = 0; r < 2; ++r)
      ASSERT_TRUE(produce[r]->stream()->Compute(produce[r]->graph()).ok());
    ASSERT_TRUE(comm->AllReduce(y).ok());
    for (int r = 0; r < 2; ++r)
      ASSERT_TRUE(consume[r]->stream()->Compute(consume[r]->graph()).ok());
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(consume[r]->stream()->Synchronize().ok());
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> z = *consume[r]->Read(0);
      EXPECT_EQ(z, std::vector<float>(kN, 4.5f))
          << "rank " << r << " " << cuda::AllReduceAlgorithmName(algo);
    }
  }
}

TEST_F(CudaSplitGpuTest, OutOfMemoryInTheMiddleOfAGraphIsAClearError) {
  constexpr int64_t kK = 4096, kM = 64, kN = 512;
  absl::StatusOr<std::unique_ptr<DeviceRun>> run =
      DeviceRun::Create(d1_, [](Context& ctx, std::vector<Tensor*>* leafs) {
        Tensor* w = *ctx.NewTensor(DType::kQ4_0, {kK, kM});
        Tensor* x = *ctx.NewTensor(DType::kF32, {kK, kN});
        leafs->push_back(w);
        leafs->push_back(x);
        return std::vector<Tensor*>{*MulMat(ctx, w, x)};
      });
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE((*run)->Set(0, RandomFloats(kK * kM, 90)).ok());
  ASSERT_TRUE((*run)->Set(1, RandomFloats(kK * kN, 91)).ok());
  // Everything but 1 MiB of the slice's share is taken: the product's scratch (its
  // activations quantized, 2.6 MiB) cannot be had.
  const size_t left = d1_->share().limit() - d1_->share().used();
  absl::StatusOr<std::unique_ptr<Buffer>> filler =
      d1_->default_buffer_type()->Allocate(left - kMiB);
  ASSERT_TRUE(filler.ok()) << filler.status();
  const absl::Status s = (*run)->Compute();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("scratch"));
  EXPECT_THAT(s.message(), HasSubstr("CUDA1"));
  EXPECT_THAT(s.message(), HasSubstr("TG_CUDA_DEVICES"));
  filler->reset();
  EXPECT_TRUE((*run)->Compute().ok());  // the device keeps working.
}

}  // namespace
}  // namespace tg
