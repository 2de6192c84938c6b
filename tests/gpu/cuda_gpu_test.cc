// The CUDA backend on a real GPU (label gpu): what tg-ops cannot show — out of memory, index
// errors reported at Synchronize, events between streams, copies between memories, pinned
// host memory, the scratch pool, and the scheduler falling back to the CPU. Every test
// skips, saying why, where no CUDA device is registered (no driver, no GPU).
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_stream.h"
#include "backends/register_builtin.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "core/quants.h"
#include "core/registry.h"
#include "core/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

using ::testing::HasSubstr;
using ::tg::testing::RandomFloats;
using ::tg::testing::ReadF32;

class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    absl::StatusOr<Device*> gpu = Registry::Get().FindDevice("CUDA0");
    if (!gpu.ok()) {
      const absl::StatusOr<int> n = cuda::CudaDeviceCount();
      GTEST_SKIP() << "no CUDA device: "
                   << (n.ok() ? absl::StrCat(*n, " devices, none usable") : n.status().ToString());
    }
    gpu_ = *gpu;
    cpu_ = Registry::Get().CpuDevice();
    ASSERT_NE(cpu_, nullptr);
    absl::StatusOr<std::unique_ptr<Stream>> s = gpu_->CreateStream();
    ASSERT_TRUE(s.ok()) << s.status();
    stream_ = std::move(*s);
  }

  // Places `graph` on the GPU, writes the leafs, computes and synchronizes.
  absl::Status Run(Graph& graph, const std::vector<std::pair<Tensor*, std::vector<float>>>& data) {
    if (absl::Status s = testing::AllocateAndCompute(gpu_, stream_.get(), graph, data, &run_);
        !s.ok()) {
      return s;
    }
    return stream_->Synchronize();
  }

  std::vector<float> Read(const Tensor& t) {
    std::vector<float> out(t.NumElements());
    EXPECT_TRUE(t.buffer->GetTensor(&t, out.data(), 0, out.size() * sizeof(float)).ok());
    return out;
  }

  Device* gpu_ = nullptr;
  Device* cpu_ = nullptr;
  std::unique_ptr<Stream> stream_;
  testing::GraphRun run_;
};

TEST_F(CudaGpuTest, OutOfMemoryIsResourceExhaustedAndTheDeviceKeepsWorking) {
  const DeviceMemory m = gpu_->memory();
  absl::StatusOr<std::unique_ptr<Buffer>> huge =
      gpu_->default_buffer_type()->Allocate(m.total + (size_t{1} << 30));
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status())) << huge.status();
  EXPECT_THAT(huge.status().message(), HasSubstr("MiB"));
  EXPECT_THAT(huge.status().message(), HasSubstr("cudaMalloc"));
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {1000});
  Graph g = *BuildGraph({*Scale(ctx, a, 2.0f)});
  ASSERT_TRUE(Run(g, {{a, std::vector<float>(1000, 1.5f)}}).ok());
  EXPECT_EQ(Read(*g.nodes.back()), std::vector<float>(1000, 3.0f));
}

TEST_F(CudaGpuTest, GetRowsIndexOutOfRangeIsInvalidArgumentAtSynchronize) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4, 3});
  Tensor* idx = *ctx.NewTensor(DType::kI32, {2});
  Tensor* rows = *GetRows(ctx, a, idx);
  Graph g = *BuildGraph({rows});
  const std::vector<float> av = RandomFloats(12, 1);
  absl::Status s = Run(g, {{a, av}, {idx, {1.0f, 7.0f}}});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("row index 7 out of range [0, 3)"));
  EXPECT_THAT(s.message(), HasSubstr("GET_ROWS"));
  const std::vector<float> got = Read(*rows);
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 4),
            std::vector<float>(av.begin() + 4, av.begin() + 8));
  EXPECT_EQ(std::vector<float>(got.begin() + 4, got.end()), std::vector<float>(4, 0.0f));
  // The error was reported once; the next graph starts clean.
  ASSERT_TRUE(Run(g, {{a, av}, {idx, {2.0f, 0.0f}}}).ok());
}

TEST_F(CudaGpuTest, MulMatIdExpertOutOfRangeIsInvalidArgument) {
  Context ctx;
  Tensor* experts = *ctx.NewTensor(DType::kQ8_0, {64, 5, 3});
  Tensor* b = *ctx.NewTensor(DType::kF32, {64, 2, 2});
  Tensor* ids = *ctx.NewTensor(DType::kI32, {2, 2});
  Graph g = *BuildGraph({*MulMatId(ctx, experts, b, ids)});
  absl::Status s = Run(g, {{experts, RandomFloats(64 * 15, 2)},
                           {b, RandomFloats(256, 3)},
                           {ids, {0.0f, 2.0f, 3.0f, 1.0f}}});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("expert id 3 out of range [0, 3)"));
}

TEST_F(CudaGpuTest, SetRowsIndexOutOfRangeSkipsTheRow) {
  Context ctx;
  Tensor* cache = *ctx.NewTensor(DType::kF16, {8, 4});
  Tensor* rows = *ctx.NewTensor(DType::kF32, {8, 2});
  Tensor* idx = *ctx.NewTensor(DType::kI32, {2});
  Graph g = *BuildGraph({*SetRows(ctx, cache, rows, idx)});
  absl::Status s =
      Run(g, {{cache, std::vector<float>(32, 0.0f)}, {rows, RandomFloats(16, 4)}, {idx, {-1, 2}}});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("row index -1 out of range [0, 4)"));
}

// Stream B waits for stream A's event before copying A's result: B sees it complete.
TEST_F(CudaGpuTest, EventsOrderTwoStreams) {
  constexpr int64_t kN = 1 << 22;  // long enough that an unordered copy would race it.
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {kN});
  Tensor* y = *Scale(ctx, x, 3.0f);
  Graph g = *BuildGraph({y});
  GraphAllocator alloc(gpu_->default_buffer_type());
  ASSERT_TRUE(alloc.Allocate(g).ok());
  const std::vector<float> xv(kN, 2.0f);
  ASSERT_TRUE(x->buffer->SetTensor(x, xv.data(), 0, kN * sizeof(float)).ok());
  Tensor* z = *ctx.NewTensor(DType::kF32, {kN});
  absl::StatusOr<std::unique_ptr<Buffer>> zbuf =
      gpu_->default_buffer_type()->Allocate(z->NumBytes());
  ASSERT_TRUE(zbuf.ok());
  ASSERT_TRUE(PlaceTensor(zbuf->get(), z, 0).ok());
  std::unique_ptr<Stream> b = *gpu_->CreateStream();
  std::unique_ptr<Event> done = *gpu_->CreateEvent();
  ASSERT_TRUE(stream_->Compute(g).ok());
  ASSERT_TRUE(stream_->RecordEvent(done.get()).ok());
  ASSERT_TRUE(b->WaitEvent(done.get()).ok());
  ASSERT_TRUE(b->CopyTensorAsync(y, z).ok());
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_EQ(Read(*z), std::vector<float>(kN, 6.0f));
  ASSERT_TRUE(stream_->Synchronize().ok());
}

TEST_F(CudaGpuTest, CopiesFromHostAndPinnedMemoryServeTheCpu) {
  Context ctx;
  Tensor* host = *ctx.NewTensor(DType::kF32, {256});
  absl::StatusOr<std::unique_ptr<Buffer>> pinned = gpu_->host_buffer_type()->Allocate(1024);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  ASSERT_TRUE(PlaceTensor(pinned->get(), host, 0).ok());
  const std::vector<float> v = RandomFloats(256, 5);
  ASSERT_TRUE(host->buffer->SetTensor(host, v.data(), 0, 1024).ok());
  EXPECT_TRUE(cpu_->SupportsBufferType(host->buffer->type()));  // the CPU computes on it.
  Tensor* dev = *ctx.NewTensor(DType::kF32, {256});
  std::unique_ptr<Buffer> dbuf = *gpu_->default_buffer_type()->Allocate(1024);
  ASSERT_TRUE(PlaceTensor(dbuf.get(), dev, 0).ok());
  ASSERT_TRUE(stream_->CopyTensorAsync(host, dev).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  EXPECT_EQ(Read(*dev), v);
  std::vector<float> back(256);
  ASSERT_TRUE(stream_->GetTensorAsync(dev, back.data(), 0, 1024).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  EXPECT_EQ(back, v);
}

TEST_F(CudaGpuTest, ScratchIsReusedAcrossNodes) {
  Context ctx;
  Tensor* w = *ctx.NewTensor(DType::kQ4_K, {512, 64});
  Tensor* x = *ctx.NewTensor(DType::kF32, {512, 1});
  // Two products, each quantizing its activations into scratch: the second reuses the first's.
  Graph g = *BuildGraph({*MulMat(ctx, w, x), *MulMat(ctx, w, x)});
  ASSERT_TRUE(Run(g, {{w, RandomFloats(512 * 64, 6)}, {x, RandomFloats(512, 7)}}).ok());
  const auto* cs = dynamic_cast<cuda::CudaStream*>(stream_.get());
  ASSERT_NE(cs, nullptr);
  EXPECT_EQ(cs->pool().device_allocations(), 1);
  EXPECT_EQ(cs->pool().in_use_bytes(), 0u);
}

// A graph with an op the GPU leaves to the CPU (SET_ROWS into Q4_K) runs split over both
// devices through the scheduler (events, async copies) and matches the CPU alone.
TEST_F(CudaGpuTest, SchedulerSplitsBetweenGpuAndCpu) {
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {256, 12});
  Tensor* w = *ctx.NewTensor(DType::kQ8_0, {256, 32});
  Tensor* cache = *ctx.NewTensor(DType::kQ4_K, {256, 4});
  Tensor* idx = *ctx.NewTensor(DType::kI32, {2});
  Tensor* h = *RmsNorm(ctx, *MulMat(ctx, w, x), 1e-5f);  // [32, 12] on the GPU.
  Tensor* rows = *View(ctx, *Cont(ctx, *Scale(ctx, x, 0.5f)), {256, 2}, {256 * 4}, 0);
  Tensor* set = *SetRows(ctx, cache, *Cont(ctx, rows), idx);  // only the CPU writes Q4_K.
  Graph g = *BuildGraph({h, set});
  EXPECT_FALSE(gpu_->SupportsOp(*set));
  for (Tensor* t : {x, w, cache, idx}) t->flags |= kFlagInput;
  std::unique_ptr<Stream> cpu_stream = *cpu_->CreateStream();
  absl::StatusOr<std::unique_ptr<Scheduler>> sched =
      Scheduler::Create({{gpu_, stream_.get()}, {cpu_, cpu_stream.get()}});
  ASSERT_TRUE(sched.ok()) << sched.status();
  absl::StatusOr<std::unique_ptr<ScheduledGraph>> sg = (*sched)->Schedule(g);
  ASSERT_TRUE(sg.ok()) << sg.status();
  EXPECT_EQ((*sg)->DeviceOf(h), gpu_);
  EXPECT_EQ((*sg)->DeviceOf(set), cpu_);
  const std::vector<float> xv = RandomFloats(256 * 12, 8), wv = RandomFloats(256 * 32, 9);
  std::vector<uint8_t> wq(RowBytes(DType::kQ8_0, 256) * 32), cq(RowBytes(DType::kQ4_K, 256) * 4);
  QuantizeRow(DType::kQ8_0, wv.data(), wq.data(), 256 * 32);
  const std::vector<float> cv(256 * 4, 0.25f);
  QuantizeRow(DType::kQ4_K, cv.data(), cq.data(), 256 * 4);
  const int32_t iv[2] = {3, 1};
  ASSERT_TRUE((*sg)->SetInput(x, xv.data(), xv.size() * 4).ok());
  ASSERT_TRUE((*sg)->SetInput(w, wq.data(), wq.size()).ok());
  ASSERT_TRUE((*sg)->SetInput(cache, cq.data(), cq.size()).ok());
  ASSERT_TRUE((*sg)->SetInput(idx, iv, sizeof(iv)).ok());
  ASSERT_TRUE((*sched)->Compute(**sg).ok());
  std::vector<float> got_h(h->NumElements());
  ASSERT_TRUE(h->buffer->GetTensor(h, got_h.data(), 0, got_h.size() * 4).ok());
  // The same on the CPU alone.
  std::vector<float> ref_h(32 * 12);
  {
    Context c2;
    Tensor* x2 = *c2.NewTensor(DType::kF32, {256, 12});
    Tensor* w2 = *c2.NewTensor(DType::kQ8_0, {256, 32});
    Tensor* h2 = *RmsNorm(c2, *MulMat(c2, w2, x2), 1e-5f);
    Graph g2 = *BuildGraph({h2});
    testing::GraphRun run;
    ASSERT_TRUE(
        testing::AllocateAndCompute(cpu_, cpu_stream.get(), g2, {{x2, xv}, {w2, wv}}, &run).ok());
    ref_h = ReadF32(*h2);
  }
  for (size_t i = 0; i < ref_h.size(); ++i) EXPECT_NEAR(got_h[i], ref_h[i], 1e-4) << i;
}

}  // namespace
}  // namespace tg
