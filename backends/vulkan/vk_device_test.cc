// The Vulkan family on whatever Vulkan device there is (lavapipe in CI): buffers and their
// sub-allocation, synchronous and asynchronous transfers on the mapped and the staging path,
// events, copies between devices, pinned host memory, kernel run-time errors, a lost device,
// and an op the device cannot run falling back to the CPU in the scheduler. Skips, with the
// reason, where there is no Vulkan device.
#include "backends/vulkan/vk_device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/register_builtin.h"
#include "backends/vulkan/vk_family.h"
#include "backends/vulkan/vk_ops.h"
#include "backends/vulkan/vk_stream.h"
#include "core/context.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "core/registry.h"
#include "core/scheduler.h"
#include "tests/lib/test_util.h"

namespace tg::vulkan {
namespace {

using ::testing::HasSubstr;

constexpr char kNoDevice[] =
    "no Vulkan device (install mesa-vulkan-drivers for lavapipe and set TG_VULKAN_CPU=1)";

// Fresh devices of their own (not the registry's), discovered with the environment variable
// `name` set to `value` (nullptr: as it is).
std::vector<std::unique_ptr<VulkanDevice>> DevicesWith(const char* name, const char* value) {
  if (value != nullptr) setenv(name, value, 1);
  absl::StatusOr<std::vector<std::unique_ptr<VulkanDevice>>> d = DiscoverDevices();
  if (value != nullptr) unsetenv(name);
  if (!d.ok()) return {};
  return std::move(*d);
}

// Fresh devices, optionally staging every transfer.
std::vector<std::unique_ptr<VulkanDevice>> FreshDevices(bool staging) {
  return DevicesWith("TG_VULKAN_STAGING", staging ? "1" : nullptr);
}

// A contiguous F32 tensor of n elements in its own context, placed at `offset` of `buffer`.
Tensor* PlacedF32(Context& ctx, Buffer* buffer, int64_t n, size_t offset = 0) {
  absl::StatusOr<Tensor*> t = ctx.NewTensor(DType::kF32, {n});
  if (!t.ok() || !PlaceTensor(buffer, *t, offset).ok()) return nullptr;
  return *t;
}

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Both paths: device memory mapped where the driver allows it, and forced staging.
class VulkanBufferTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    devices_ = FreshDevices(GetParam());
    if (devices_.empty()) GTEST_SKIP() << kNoDevice;
    device_ = devices_[0].get();
    ASSERT_TRUE(device_->Ready().ok());
    ASSERT_EQ(device_->device_memory_mapped() && GetParam(), false);
  }
  std::vector<std::unique_ptr<VulkanDevice>> devices_;
  VulkanDevice* device_ = nullptr;
};

TEST_P(VulkanBufferTest, SetGetMemsetClearRoundTrip) {
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = device_->default_buffer_type()->Allocate(4096);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Context ctx;
  Tensor* t = PlacedF32(ctx, buffer->get(), 100, 256);
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE((*buffer)->type()->is_host());
  const std::vector<float> data = Iota(100, 1.0f);
  ASSERT_TRUE((*buffer)->SetTensor(t, data.data(), 0, 400).ok());
  ASSERT_TRUE((*buffer)->MemsetTensor(t, 0, 40, 8).ok());  // elements 10, 11.
  std::vector<float> back(100, -1.0f);
  ASSERT_TRUE((*buffer)->GetTensor(t, back.data(), 0, 400).ok());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(back[i], (i == 10 || i == 11) ? 0.0f : data[i]) << i;
  float part[3];
  ASSERT_TRUE((*buffer)->GetTensor(t, part, 4 * 50, sizeof(part)).ok());
  EXPECT_EQ(part[2], 53.0f);
  EXPECT_EQ((*buffer)->GetTensor(t, part, 399, 4).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE((*buffer)->Clear(0xff).ok());
  ASSERT_TRUE((*buffer)->GetTensor(t, back.data(), 0, 400).ok());
  uint32_t bits;
  std::memcpy(&bits, &back[7], 4);
  EXPECT_EQ(bits, 0xffffffffu);
}

TEST_P(VulkanBufferTest, AsyncTransfersKeepStreamOrder) {
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = device_->default_buffer_type()->Allocate(1024);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Context ctx;
  Tensor* t = PlacedF32(ctx, buffer->get(), 64);
  absl::StatusOr<std::unique_ptr<Stream>> stream = device_->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<float> first = Iota(64, 0.0f), second = Iota(64, 1000.0f);
  std::vector<float> got_first(64), got_second(64);
  // The caller's memory is free as soon as a set returns: overwrite it at once.
  ASSERT_TRUE((*stream)->SetTensorAsync(t, first.data(), 0, 256).ok());
  std::fill(first.begin(), first.end(), -7.0f);
  ASSERT_TRUE((*stream)->GetTensorAsync(t, got_first.data(), 0, 256).ok());
  ASSERT_TRUE((*stream)->SetTensorAsync(t, second.data(), 0, 256).ok());
  ASSERT_TRUE((*stream)->GetTensorAsync(t, got_second.data(), 0, 256).ok());
  absl::StatusOr<std::unique_ptr<Event>> event = device_->CreateEvent();
  ASSERT_TRUE(event.ok());
  ASSERT_TRUE((*stream)->RecordEvent(event->get()).ok());
  ASSERT_TRUE((*event)->Synchronize().ok());  // the read-backs have landed.
  EXPECT_EQ(got_first, Iota(64, 0.0f));
  EXPECT_EQ(got_second, Iota(64, 1000.0f));
  ASSERT_TRUE((*stream)->Synchronize().ok());
}

// Transfers larger than the staging ring go in chunks, waiting for the ring to free up.
TEST_P(VulkanBufferTest, LargeAsyncTransfersGoInChunks) {
  const int64_t n = (StagingRing::kCapacity * 3 / 2) / sizeof(float) + 17;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      device_->default_buffer_type()->Allocate(n * sizeof(float));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Context ctx;
  Tensor* t = PlacedF32(ctx, buffer->get(), n);
  absl::StatusOr<std::unique_ptr<Stream>> stream = device_->CreateStream();
  ASSERT_TRUE(stream.ok());
  const std::vector<float> data = Iota(n, 3.0f);
  std::vector<float> back(n, 0.0f);
  ASSERT_TRUE((*stream)->SetTensorAsync(t, data.data(), 0, n * sizeof(float)).ok());
  ASSERT_TRUE((*stream)->GetTensorAsync(t, back.data(), 0, n * sizeof(float)).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  int64_t bad = 0;
  while (bad < n && back[bad] == data[bad]) ++bad;
  EXPECT_EQ(bad, n) << "first difference at " << bad << ": " << back[bad] << " vs " << data[bad];
}

INSTANTIATE_TEST_SUITE_P(MappedAndStaged, VulkanBufferTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "staged" : "mapped"; });

TEST(VulkanDeviceTest, SmallBuffersShareBlocksAndGiveThemBack) {
  auto devices = FreshDevices(false);
  if (devices.empty()) GTEST_SKIP() << kNoDevice;
  VulkanDevice* device = devices[0].get();
  ASSERT_TRUE(device->Ready().ok());
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (int i = 0; i < 64; ++i) {
    absl::StatusOr<std::unique_ptr<Buffer>> b = device->default_buffer_type()->Allocate(1 << 20);
    ASSERT_TRUE(b.ok()) << b.status();
    buffers.push_back(std::move(*b));
  }
  EXPECT_EQ(device->device_memory().allocated_bytes(), MemoryPool::kBlockBytes);
  for (size_t i = 1; i < buffers.size(); ++i) {
    EXPECT_GE(reinterpret_cast<uintptr_t>(buffers[i]->base()),
              reinterpret_cast<uintptr_t>(buffers[i - 1]->base()) + (1 << 20));
  }
  buffers.clear();
  EXPECT_EQ(device->device_memory().allocated_bytes(), 0u);
}

TEST(VulkanDeviceTest, AllocationBeyondTheDeviceLimitIsResourceExhausted) {
  auto devices = FreshDevices(false);
  if (devices.empty()) GTEST_SKIP() << kNoDevice;
  BufferType* type = devices[0]->default_buffer_type();
  absl::StatusOr<std::unique_ptr<Buffer>> b = type->Allocate(type->max_size() + 1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("maxMemoryAllocationSize"));
  EXPECT_THAT(b.status().message(), HasSubstr("MiB"));
}

TEST(VulkanDeviceTest, RegisteredAsVulkan0WithAStableId) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> d = Registry::Get().FindDevice("Vulkan0");
  if (!d.ok()) GTEST_SKIP() << kNoDevice;
  EXPECT_TRUE(absl::StartsWith((*d)->id(), "pci:") || absl::StartsWith((*d)->id(), "uuid:"))
      << (*d)->id();
  EXPECT_GT((*d)->memory().total, 0u);
  EXPECT_TRUE((*d)->SupportsBufferType((*d)->default_buffer_type()));
  EXPECT_FALSE((*d)->SupportsBufferType(Registry::Get().CpuDevice()->default_buffer_type()));
}

TEST(VulkanDeviceTest, PinnedHostMemoryIsHostAddressableAndCopiesToTheDevice) {
  auto devices = FreshDevices(true);
  if (devices.empty()) GTEST_SKIP() << kNoDevice;
  VulkanDevice* device = devices[0].get();
  BufferType* host = device->host_buffer_type();
  ASSERT_NE(host, nullptr);
  EXPECT_TRUE(host->is_host());
  absl::StatusOr<std::unique_ptr<Buffer>> pinned = host->Allocate(1024);
  absl::StatusOr<std::unique_ptr<Buffer>> local = device->default_buffer_type()->Allocate(1024);
  ASSERT_TRUE(pinned.ok() && local.ok());
  Context ctx;
  Tensor* src = PlacedF32(ctx, pinned->get(), 32);
  Tensor* dst = PlacedF32(ctx, local->get(), 32);
  const std::vector<float> data = Iota(32, 5.0f);
  std::memcpy(src->data, data.data(), 128);  // the CPU writes it directly.
  absl::StatusOr<std::unique_ptr<Stream>> stream = device->CreateStream();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->CopyTensorAsync(src, dst).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  std::vector<float> back(32);
  ASSERT_TRUE((*local)->GetTensor(dst, back.data(), 0, 128).ok());
  EXPECT_EQ(back, data);
}

// Between two Vulkan devices (two logical devices here, one of them staging), from the host
// and into CPU memory through the scheduler's fallbacks.
TEST(VulkanDeviceTest, CopiesBetweenDevicesAndTheHost) {
  auto mapped = FreshDevices(false);
  auto staged = FreshDevices(true);
  if (mapped.empty() || staged.empty()) GTEST_SKIP() << kNoDevice;
  VulkanDevice* a = mapped[0].get();
  VulkanDevice* b = staged[0].get();
  Device* cpu = testing::CpuDevice();
  auto buf_a = a->default_buffer_type()->Allocate(1024);
  auto buf_b = b->default_buffer_type()->Allocate(1024);
  auto buf_c = cpu->default_buffer_type()->Allocate(1024);
  ASSERT_TRUE(buf_a.ok() && buf_b.ok() && buf_c.ok());
  Context ctx;
  Tensor* ta = PlacedF32(ctx, buf_a->get(), 40);
  Tensor* ta2 = PlacedF32(ctx, buf_a->get(), 40, 512);
  Tensor* tb = PlacedF32(ctx, buf_b->get(), 40);
  Tensor* tc = PlacedF32(ctx, buf_c->get(), 40);
  const std::vector<float> data = Iota(40, -20.0f);
  std::memcpy(tc->data, data.data(), 160);
  ASSERT_TRUE((*buf_a)->CopyFrom(tc, ta).ok());   // host -> a.
  ASSERT_TRUE((*buf_a)->CopyFrom(ta, ta2).ok());  // a -> a.
  ASSERT_TRUE((*buf_b)->CopyFrom(ta2, tb).ok());  // a -> b (another device).
  std::vector<float> back(40);
  ASSERT_TRUE((*buf_b)->GetTensor(tb, back.data(), 0, 160).ok());
  EXPECT_EQ(back, data);
  // b -> a asynchronously on a's stream.
  ASSERT_TRUE((*buf_a)->Clear(0).ok());
  auto stream = a->CreateStream();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->CopyTensorAsync(tb, ta).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  ASSERT_TRUE((*buf_a)->GetTensor(ta, back.data(), 0, 160).ok());
  EXPECT_EQ(back, data);
  // The CPU cannot read device memory directly: it says so, and the scheduler goes through
  // the host instead.
  EXPECT_EQ((*buf_c)->CopyFrom(ta, tc).code(), absl::StatusCode::kUnimplemented);
}

// Events order two streams of one device on the device itself.
TEST(VulkanDeviceTest, AStreamWaitsForAnotherStreamsEvent) {
  auto devices = FreshDevices(false);
  if (devices.empty()) GTEST_SKIP() << kNoDevice;
  VulkanDevice* device = devices[0].get();
  auto buffer = device->default_buffer_type()->Allocate(1 << 16);
  ASSERT_TRUE(buffer.ok());
  Context ctx;
  Tensor* x = PlacedF32(ctx, buffer->get(), 4096);
  Tensor* y = PlacedF32(ctx, buffer->get(), 4096, 1 << 15);
  auto s1 = device->CreateStream();
  auto s2 = device->CreateStream();
  auto event = device->CreateEvent();
  ASSERT_TRUE(s1.ok() && s2.ok() && event.ok());
  const std::vector<float> data = Iota(4096, 1.0f);
  ASSERT_TRUE((*s1)->SetTensorAsync(x, data.data(), 0, data.size() * 4).ok());
  ASSERT_TRUE((*s1)->RecordEvent(event->get()).ok());
  ASSERT_TRUE((*s2)->WaitEvent(event->get()).ok());
  ASSERT_TRUE((*s2)->CopyTensorAsync(x, y).ok());
  std::vector<float> back(4096);
  ASSERT_TRUE((*s2)->GetTensorAsync(y, back.data(), 0, back.size() * 4).ok());
  ASSERT_TRUE((*s2)->Synchronize().ok());
  EXPECT_EQ(back, data);
}

// GET_ROWS with an index out of range: the kernel writes zeros and Synchronize names the node.
TEST(VulkanDeviceTest, KernelRunTimeErrorsComeBackAsInvalidArgument) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> device = Registry::Get().FindDevice("Vulkan0");
  if (!device.ok()) GTEST_SKIP() << kNoDevice;
  Context ctx;
  Tensor* table = *ctx.NewTensor(DType::kF16, {8, 4});
  Tensor* idx = *ctx.NewTensor(DType::kI32, {3});
  table->flags |= kFlagInput;
  idx->flags |= kFlagInput;
  absl::StatusOr<Tensor*> rows = GetRows(ctx, table, idx);
  ASSERT_TRUE(rows.ok());
  (*rows)->SetName("picked");
  (*rows)->flags |= kFlagOutput;
  absl::StatusOr<Graph> graph = BuildGraph({*rows});
  ASSERT_TRUE(graph.ok());
  auto stream = (*device)->CreateStream();
  ASSERT_TRUE(stream.ok());
  testing::GraphRun run;
  std::vector<float> table_data = Iota(32, 1.0f);
  ASSERT_TRUE(testing::AllocateAndCompute(*device, stream->get(), *graph,
                                          {{table, table_data}, {idx, {2.0f, 7.0f, 1.0f}}}, &run)
                  .ok());
  absl::Status s = (*stream)->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("picked"));
  EXPECT_THAT(s.message(), HasSubstr("index 7 out of range [0, 4)"));
  const std::vector<float> got = testing::ReadF32(**rows);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(got[i], table_data[16 + i]);  // row 2.
    EXPECT_EQ(got[8 + i], 0.0f);            // the bad row.
    EXPECT_EQ(got[16 + i], table_data[8 + i]);
  }
  // The error was reported once; the stream goes on.
  EXPECT_TRUE((*stream)->Synchronize().ok());
}

// FLASH_ATTN with a head larger than the kernel keeps on chip is not supported: the
// scheduler runs it on the CPU and the nodes around it on the Vulkan device, and the result is
// the CPU's.
TEST(VulkanDeviceTest, AnOpTheDeviceCannotRunFallsBackToTheCpu) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> vk = Registry::Get().FindDevice("Vulkan0");
  if (!vk.ok()) GTEST_SKIP() << kNoDevice;
  Device* cpu = Registry::Get().CpuDevice();
  constexpr int64_t kHead = 640, kKv = 7;
  auto build = [&](Context& ctx, Tensor** inputs, Tensor** scaled, Tensor** attn) -> Tensor* {
    for (int i = 0; i < 3; ++i) {
      inputs[i] = *ctx.NewTensor(DType::kF32, {kHead, i == 0 ? 2 : kKv, 1, 1});
      inputs[i]->flags |= kFlagInput;
    }
    *scaled = *Scale(ctx, inputs[0], 0.5f);
    *attn = *FlashAttn(ctx, *scaled, inputs[1], inputs[2], nullptr, 0.125f);
    Tensor* out = *Silu(ctx, *attn);
    out->flags |= kFlagOutput;
    return out;
  };
  std::vector<float> data[3];
  for (int i = 0; i < 3; ++i) data[i] = testing::RandomFloats(kHead * (i == 0 ? 2 : kKv), 11 + i);

  Context ctx;
  Tensor *in[3], *scaled, *attn;
  Tensor* out = build(ctx, in, &scaled, &attn);
  ASSERT_FALSE((*vk)->SupportsOp(*attn));
  absl::StatusOr<Graph> graph = BuildGraph({out});
  ASSERT_TRUE(graph.ok());
  auto vk_stream = (*vk)->CreateStream();
  auto cpu_stream = cpu->CreateStream();
  ASSERT_TRUE(vk_stream.ok() && cpu_stream.ok());
  auto sched = Scheduler::Create({{*vk, vk_stream->get()}, {cpu, cpu_stream->get()}});
  ASSERT_TRUE(sched.ok()) << sched.status();
  auto scheduled = (*sched)->Schedule(*graph);
  ASSERT_TRUE(scheduled.ok()) << scheduled.status();
  EXPECT_EQ((*scheduled)->DeviceOf(scaled), *vk);
  EXPECT_EQ((*scheduled)->DeviceOf(attn), cpu);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*scheduled)->SetInput(in[i], data[i].data(), data[i].size() * 4).ok());
  }
  ASSERT_TRUE((*sched)->Compute(**scheduled).ok());
  std::vector<float> got(out->NumElements());
  ASSERT_TRUE(out->buffer->GetTensor(out, got.data(), 0, got.size() * 4).ok());

  // The same graph on the CPU alone.
  Context ref_ctx;
  Tensor *ref_in[3], *ref_scaled, *ref_attn;
  Tensor* ref_out = build(ref_ctx, ref_in, &ref_scaled, &ref_attn);
  absl::StatusOr<Graph> ref_graph = BuildGraph({ref_out});
  ASSERT_TRUE(ref_graph.ok());
  testing::GraphRun run;
  ASSERT_TRUE(testing::AllocateAndCompute(
                  cpu, cpu_stream->get(), *ref_graph,
                  {{ref_in[0], data[0]}, {ref_in[1], data[1]}, {ref_in[2], data[2]}}, &run)
                  .ok());
  const std::vector<float> want = testing::ReadF32(*ref_out);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

// A graph's leaf data: random values by default.
using MakeGraph = std::function<Tensor*(Context&, std::vector<Tensor*>*)>;
using LeafValues = std::function<std::vector<float>(size_t input, const Tensor& leaf)>;
std::vector<float> RandomLeaf(size_t input, const Tensor& leaf) {
  return testing::RandomFloats(leaf.NumElements(), 100 + input);
}

// The output of the graph `make` builds, computed on `device` with its inputs set to `values`
// (I32 leafs take them as integers); empty on failure.
std::vector<float> ComputeOn(Device* device, const MakeGraph& make, const LeafValues& values,
                             int* dispatches = nullptr) {
  Context ctx;
  std::vector<Tensor*> inputs;
  Tensor* out = make(ctx, &inputs);
  out->flags |= kFlagOutput;
  absl::StatusOr<Graph> graph = BuildGraph({out});
  auto stream = device->CreateStream();
  if (!graph.ok() || !stream.ok()) return {};
  std::vector<std::pair<Tensor*, std::vector<float>>> data;
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i]->flags |= kFlagInput;
    data.emplace_back(inputs[i], values(i, *inputs[i]));
  }
  testing::GraphRun graph_run;
  if (!testing::AllocateAndCompute(device, stream->get(), *graph, data, &graph_run).ok() ||
      !(*stream)->Synchronize().ok()) {
    return {};
  }
  if (dispatches != nullptr) {
    *dispatches = static_cast<VulkanStream*>(stream->get())->last_dispatches();
  }
  return testing::ReadF32(*out);
}

// The graph `make` builds, computed on Vulkan0 and on the CPU with the same random inputs;
// the NMSE of the two results.
double VulkanVsCpuNmse(Device* vk, const MakeGraph& make, int* vk_dispatches = nullptr) {
  const std::vector<float> got = ComputeOn(vk, make, RandomLeaf, vk_dispatches);
  const std::vector<float> cpu = ComputeOn(Registry::Get().CpuDevice(), make, RandomLeaf);
  if (got.empty() || cpu.empty()) return 1e30;
  return testing::Nmse(got, std::vector<double>(cpu.begin(), cpu.end()));
}

// Kernels whose invocations loop long: lavapipe ends an invocation after 65535 loop
// iterations, so these shapes (a long context, a long dot product) pass only if the
// kernels keep their inner loops unrolled.
TEST(VulkanDeviceTest, LongRowsAndContextsComputeCompletely) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> vk = Registry::Get().FindDevice("Vulkan0");
  if (!vk.ok()) GTEST_SKIP() << kNoDevice;
  const double attn = VulkanVsCpuNmse(*vk, [](Context& ctx, std::vector<Tensor*>* in) {
    Tensor* q = *ctx.NewTensor(DType::kF32, {128, 2, 2, 1});
    Tensor* k = *ctx.NewTensor(DType::kF16, {128, 4096, 1, 1});
    Tensor* v = *ctx.NewTensor(DType::kF16, {128, 4096, 1, 1});
    *in = {q, k, v};
    return *FlashAttn(ctx, q, k, v, nullptr, 0.088f);
  });
  EXPECT_LT(attn, 1e-9);
  const double matmul = VulkanVsCpuNmse(*vk, [](Context& ctx, std::vector<Tensor*>* in) {
    Tensor* a = *ctx.NewTensor(DType::kQ8_0, {8192, 70});
    Tensor* b = *ctx.NewTensor(DType::kF32, {8192, 33});
    *in = {a, b};
    return *MulMat(ctx, a, b);
  });
  EXPECT_LT(matmul, 1e-5);  // activations rounded to Q8_0 on both, summed in other orders.
}

// The fused kernels (a sum, its norm times weight, also quantizing the result for the products
// after it; three matrices of one input in one dispatch; gate/up/swiglu) give the CPU's
// results, and they do fuse: fewer dispatches than nodes. Both
// kernel styles: the register kernels lavapipe takes, and the matrix-vector kernel's fused
// modes that GPUs take for decode (forced with TG_VULKAN_KERNELS=gpu). Rows of 62 put the
// matrices' seams inside the matrix-vector kernel's workgroups of 4 rows.
TEST(VulkanDeviceTest, FusedKernelsMatchTheCpu) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> vk = Registry::Get().FindDevice("Vulkan0");
  if (!vk.ok()) GTEST_SKIP() << kNoDevice;
  std::vector<std::unique_ptr<VulkanDevice>> gpu_style = DevicesWith("TG_VULKAN_KERNELS", "gpu");
  ASSERT_FALSE(gpu_style.empty());
  for (Device* device : {*vk, static_cast<Device*>(gpu_style[0].get())}) {
    const bool gpu = device != *vk;
    for (DType type : {DType::kQ4_K, DType::kQ8_0, DType::kF16}) {
      int dispatches = 0;
      auto make = [type](Context& ctx, std::vector<Tensor*>* in) {
        Tensor* x = *ctx.NewTensor(DType::kF32, {256, 5});
        Tensor* y = *ctx.NewTensor(DType::kF32, {256, 5});
        Tensor* w = *ctx.NewTensor(DType::kF32, {256});
        Tensor* wq = *ctx.NewTensor(type, {256, 62});
        Tensor* wk = *ctx.NewTensor(type, {256, 62});
        Tensor* wv = *ctx.NewTensor(type, {256, 62});
        Tensor* wg = *ctx.NewTensor(type, {256, 62});
        Tensor* wu = *ctx.NewTensor(type, {256, 62});
        *in = {x, y, w, wq, wk, wv, wg, wu};
        Tensor* normed = *Mul(ctx, *RmsNorm(ctx, x, 1e-5f), w);
        Tensor* q = *MulMat(ctx, wq, normed);
        Tensor* k = *MulMat(ctx, wk, normed);
        Tensor* v = *MulMat(ctx, wv, normed);
        Tensor* act = *Swiglu(ctx, *MulMat(ctx, wg, y), *MulMat(ctx, wu, y));
        return *Add(ctx, *Add(ctx, *Add(ctx, q, k), v), act);
      };
      EXPECT_LT(VulkanVsCpuNmse(device, make, &dispatches), type == DType::kF16 ? 1e-9 : 1e-5)
          << DTypeName(type) << (gpu ? " gpu kernels" : "");
      // norm*w | q,k,v | gate,up,swiglu | add | add | add, and for the quantized types the
      // preparation of y's activations (norm*w's are quantized by the norm's kernel itself);
      // unfused, the products alone would be 5 dispatches.
      EXPECT_LE(dispatches, type == DType::kF16 ? 6 : 7)
          << DTypeName(type) << (gpu ? " gpu kernels" : "");
      // A residual sum, its norm times w and a product of that: the sum, the norm, the MUL and
      // the product's activations in one dispatch, the product in the next.
      auto summed = [type](Context& ctx, std::vector<Tensor*>* in) {
        Tensor* x = *ctx.NewTensor(DType::kF32, {256, 5});
        Tensor* z = *ctx.NewTensor(DType::kF32, {256, 5});
        Tensor* w = *ctx.NewTensor(DType::kF32, {256});
        Tensor* wq = *ctx.NewTensor(type, {256, 62});
        *in = {x, z, w, wq};
        Tensor* sum = *Add(ctx, x, z);
        sum->flags |= kFlagOutput;  // read later, as a residual stream is: kept apart.
        return *MulMat(ctx, wq, *Mul(ctx, *RmsNorm(ctx, sum, 1e-5f), w));
      };
      EXPECT_LT(VulkanVsCpuNmse(device, summed, &dispatches), type == DType::kF16 ? 1e-9 : 1e-5)
          << DTypeName(type) << (gpu ? " gpu kernels" : "");
      EXPECT_EQ(dispatches, 2) << DTypeName(type) << (gpu ? " gpu kernels" : "");
    }
    // The sum the fused norm writes, read again after it: sum + norm(sum) * w in two dispatches.
    int dispatches = 0;
    auto residual = [](Context& ctx, std::vector<Tensor*>* in) {
      Tensor* x = *ctx.NewTensor(DType::kF32, {256, 5});
      Tensor* z = *ctx.NewTensor(DType::kF32, {256, 5});
      Tensor* w = *ctx.NewTensor(DType::kF32, {256});
      *in = {x, z, w};
      Tensor* sum = *Add(ctx, x, z);
      return *Add(ctx, sum, *Mul(ctx, *RmsNorm(ctx, sum, 1e-5f), w));
    };
    EXPECT_LT(VulkanVsCpuNmse(device, residual, &dispatches), 1e-12) << (gpu ? "gpu kernels" : "");
    EXPECT_EQ(dispatches, 2) << (gpu ? "gpu kernels" : "");
  }
}

// DIV is IEEE division, correctly rounded (docs/ops.md), although lavapipe's OpFDiv is not
// and its fma is unfused (a division refined by fma was off by an ulp in 1 of 10 quotients).
TEST(VulkanDeviceTest, DivisionIsCorrectlyRounded) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> vk = Registry::Get().FindDevice("Vulkan0");
  if (!vk.ok()) GTEST_SKIP() << kNoDevice;
  const double nmse = VulkanVsCpuNmse(*vk, [](Context& ctx, std::vector<Tensor*>* in) {
    Tensor* a = *ctx.NewTensor(DType::kF32, {1 << 16});
    Tensor* b = *ctx.NewTensor(DType::kF32, {1 << 16});
    *in = {a, b};
    return *Div(ctx, a, b);
  });
  EXPECT_EQ(nmse, 0.0);
}

// SAMPLE on Vulkan0 draws the CPU's token, row for row, over many rows and settings: the same
// candidates in the same order, the same Philox number, f64 weights whose exp is within an ulp
// of glibc's (sample.comp), so a pick could differ only where u lands within a few ulps of a
// prefix sum (docs/ops.md).
TEST(VulkanDeviceTest, SampleDrawsTheCpusTokens) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> vk = Registry::Get().FindDevice("Vulkan0");
  if (!vk.ok()) GTEST_SKIP() << kNoDevice;
  constexpr int64_t kRows = 256;
  struct Setting {
    int64_t vocab;
    SampleParams params;
    int64_t window = 0;
  };
  const Setting settings[] = {
      {4096, {.seed = 42}},  // llama.cpp's defaults: T 0.8, top_k 40, top_p 0.95, min_p 0.05.
      {4096, {.temperature = 1.0f, .top_k = 1024, .top_p = 1.0f, .min_p = 0.0f, .seed = 7}},
      {1000,
       {.temperature = 0.7f, .top_k = 0, .top_p = 0.9f, .min_p = 0.0f, .seed = uint64_t{1} << 40}},
      {4096, {.temperature = 0.9f, .top_k = 50, .repeat_penalty = 1.2f, .seed = 3}, 200},
  };
  for (const Setting& s : settings) {
    auto make = [&s](Context& ctx, std::vector<Tensor*>* in) {
      Tensor* logits = *ctx.NewTensor(DType::kF32, {s.vocab, kRows});
      Tensor* pos = *ctx.NewTensor(DType::kI32, {kRows});
      Tensor* recent = s.window > 0 ? *ctx.NewTensor(DType::kI32, {s.window}) : nullptr;
      *in = {logits, pos};
      if (recent != nullptr) in->push_back(recent);
      return *Sample(ctx, logits, pos, recent, s.params);
    };
    auto values = [&s](size_t input, const Tensor& leaf) {
      if (input == 0) return testing::RandomFloats(leaf.NumElements(), 5, -4.0f, 4.0f);
      std::vector<float> v(leaf.NumElements());
      for (size_t i = 0; i < v.size(); ++i) {  // positions; a window with repeats.
        v[i] = input == 1 ? static_cast<float>(1000 + i) : static_cast<float>(i * 7 % 150);
      }
      return v;
    };
    const std::vector<float> got = ComputeOn(*vk, make, values);
    const std::vector<float> want = ComputeOn(Registry::Get().CpuDevice(), make, values);
    ASSERT_EQ(got.size(), static_cast<size_t>(kRows));
    ASSERT_EQ(want.size(), got.size());
    int differ = 0;
    for (int64_t r = 0; r < kRows; ++r) differ += got[r] != want[r] ? 1 : 0;
    EXPECT_EQ(differ, 0) << "vocab " << s.vocab << ", top_k " << s.params.top_k;
  }
}

// TOP_K of rows longer than the kernel sorts at once: the two-walk path (a lower bound from
// each invocation's largest key) and, for a row whose largest values all sit in a few
// invocations' elements (each invocation walks every 256th), the radix select it falls back
// to. Both give the CPU's indices.
TEST(VulkanDeviceTest, TopKOfLongRowsMatchesTheCpu) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  absl::StatusOr<Device*> vk = Registry::Get().FindDevice("Vulkan0");
  if (!vk.ok()) GTEST_SKIP() << kNoDevice;
  constexpr int64_t kRow = 8192, kRows = 3, kInvocations = 256;
  for (int64_t k : {int64_t{5}, int64_t{200}}) {
    auto make = [k](Context& ctx, std::vector<Tensor*>* in) {
      Tensor* x = *ctx.NewTensor(DType::kF32, {kRow, kRows});
      *in = {x};
      return *TopK(ctx, x, k);
    };
    auto values = [](size_t, const Tensor& leaf) {
      std::vector<float> v(leaf.NumElements());
      for (size_t i = 0; i < v.size(); ++i) {  // element j of a row: -(j % 256) + j / 256 / 1024.
        const int64_t j = static_cast<int64_t>(i) % kRow;
        v[i] = static_cast<float>(-(j % kInvocations)) +
               static_cast<float>(j / kInvocations) / 1024.0f;
      }
      return v;
    };
    const std::vector<float> got = ComputeOn(*vk, make, values);
    const std::vector<float> want = ComputeOn(Registry::Get().CpuDevice(), make, values);
    ASSERT_EQ(got.size(), static_cast<size_t>(k * kRows));
    EXPECT_EQ(got, want) << "k " << k;
  }
}

// FLASH_ATTN's decode kernel (flash_attn_decode.comp), which GPUs take for up to 4 queries
// and lavapipe only with TG_VULKAN_FA_DECODE=1, gives the CPU's results on decode steps of a
// padded cache: n_kv keys of which the last kPadding are masked and hold NaN in K and V (stale
// slots must not leak in, also where a subgroup's teams see both sides of the boundary: heads
// of 16 and 8 have teams of 2 and 1 on lavapipe's 8-wide subgroups), GQA, heads of 8 to 256,
// F16 and F32 K/V. More queries take the other kernel even when forced.
TEST(VulkanDeviceTest, DecodeAttentionMatchesTheCpu) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  auto forced = DevicesWith("TG_VULKAN_FA_DECODE", "1");
  auto off = DevicesWith("TG_VULKAN_FA_DECODE", "0");
  auto plain = DevicesWith("TG_VULKAN_FA_DECODE", nullptr);
  if (forced.empty() || off.empty() || plain.empty()) GTEST_SKIP() << kNoDevice;
  VulkanDevice* vk = forced[0].get();
  constexpr int64_t kPadding = 37;
  struct Shape {
    int64_t d, n_q, n_head, n_head_kv, n_kv;
    DType k_type, v_type;
  };
  const Shape shapes[] = {{64, 1, 8, 2, 555, DType::kF16, DType::kF16},
                          {128, 4, 4, 4, 300, DType::kF32, DType::kF16},
                          {256, 2, 2, 1, 97, DType::kF16, DType::kF32},
                          {16, 1, 4, 2, 203, DType::kF16, DType::kF16},
                          {8, 3, 4, 1, 203, DType::kF16, DType::kF16}};
  for (const Shape& s : shapes) {
    auto make = [s](Context& ctx, std::vector<Tensor*>* in) {
      Tensor* q = *ctx.NewTensor(DType::kF32, {s.d, s.n_q, s.n_head, 1});
      Tensor* k = *ctx.NewTensor(s.k_type, {s.d, s.n_kv, s.n_head_kv, 1});
      Tensor* v = *ctx.NewTensor(s.v_type, {s.d, s.n_kv, s.n_head_kv, 1});
      Tensor* mask = *ctx.NewTensor(DType::kF16, {s.n_kv, s.n_q, 1, 1});
      *in = {q, k, v, mask};
      return *FlashAttn(ctx, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(s.d)));
    };
    auto values = [s](size_t input, const Tensor& leaf) {
      std::vector<float> x = RandomLeaf(input, leaf);
      const int64_t visible = s.n_kv - kPadding;
      for (size_t i = 0; i < x.size(); ++i) {
        const int64_t key =
            input == 3 ? static_cast<int64_t>(i) % s.n_kv : static_cast<int64_t>(i) / s.d % s.n_kv;
        if (input == 3) x[i] = key < visible ? 0.0f : -INFINITY;
        if ((input == 1 || input == 2) && key >= visible) x[i] = NAN;
      }
      return x;
    };
    const std::string name = absl::StrCat("d ", s.d, ", n_q ", s.n_q);
    Context ctx;
    std::vector<Tensor*> in;
    const Tensor* node = make(ctx, &in);
    EXPECT_TRUE(UsesDecodeFlashAttn(*vk, *node)) << name;
    EXPECT_FALSE(UsesDecodeFlashAttn(*off[0], *node)) << name;
    EXPECT_EQ(UsesDecodeFlashAttn(*plain[0], *node), !plain[0]->info().cpu_type()) << name;
    const std::vector<float> got = ComputeOn(vk, make, values);
    const std::vector<float> want = ComputeOn(Registry::Get().CpuDevice(), make, values);
    ASSERT_EQ(got.size(), want.size()) << name;
    ASSERT_FALSE(got.empty()) << name;
    EXPECT_LT(testing::Nmse(got, std::vector<double>(want.begin(), want.end())), 1e-9) << name;
  }
  Context ctx;
  Tensor* q = *ctx.NewTensor(DType::kF32, {64, 5, 2, 1});
  Tensor* kv = *ctx.NewTensor(DType::kF16, {64, 40, 2, 1});
  EXPECT_FALSE(UsesDecodeFlashAttn(*vk, **FlashAttn(ctx, q, kv, kv, nullptr, 0.125f)));
}

TEST(VulkanDeviceTest, ALostDeviceFailsEveryCallWithoutAborting) {
  auto devices = FreshDevices(false);
  if (devices.empty()) GTEST_SKIP() << kNoDevice;
  VulkanDevice* device = devices[0].get();
  auto buffer = device->default_buffer_type()->Allocate(1024);
  auto stream = device->CreateStream();
  ASSERT_TRUE(buffer.ok() && stream.ok());
  Context ctx;
  Tensor* t = PlacedF32(ctx, buffer->get(), 16);
  device->SimulateLossForTesting();
  float x[16] = {};
  EXPECT_EQ((*buffer)->SetTensor(t, x, 0, sizeof(x)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*stream)->SetTensorAsync(t, x, 0, sizeof(x)).code(), absl::StatusCode::kUnavailable);
  Graph empty;
  EXPECT_EQ((*stream)->Compute(empty).code(), absl::StatusCode::kUnavailable);
  absl::Status s = (*stream)->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("lost"));
}

}  // namespace
}  // namespace tg::vulkan
