// MetaDevice as the partitioner sees it (ShadowLookup), and two meta devices in one process:
// the allocations and resident placements of one do not change the other's addresses or
// resident generation.
#include "meta/meta_device.h"

#include <memory>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "gtest/gtest.h"

namespace tg::meta {
namespace {

using Home = ShadowLookup::Home;

// A meta device over two CPU devices of its own, cutting every tensor along dim 1.
struct Meta {
  Meta() : a("A", "a", 1), b("B", "b", 1) {
    device = *MetaDevice::Create({&a, &b}, [](const Tensor& t) -> absl::StatusOr<SplitState> {
      return SplitState::Axis(1, ProportionalRanges(t.ne[1], 1, std::vector<float>{0.5f, 0.5f}));
    });
  }
  std::unique_ptr<Buffer> Allocate(BufferUsage usage, size_t size = 4096) {
    std::unique_ptr<Buffer> buffer = *device->default_buffer_type()->Allocate(size);
    buffer->set_usage(usage);
    return buffer;
  }
  uintptr_t Base(const Buffer& b) { return reinterpret_cast<uintptr_t>(b.base()); }

  cpu::CpuDevice a;
  cpu::CpuDevice b;
  std::unique_ptr<MetaDevice> device;
};

TEST(MetaDeviceTest, TwoDevicesKeepTheirOwnCounters) {
  Meta one;
  Meta two;
  std::unique_ptr<Buffer> one_first = one.Allocate(BufferUsage::kWeights);
  std::unique_ptr<Buffer> one_second = one.Allocate(BufferUsage::kCompute, 1 << 20);
  std::unique_ptr<Buffer> two_first = two.Allocate(BufferUsage::kWeights);
  // Each device hands out its own range: two's first buffer is where one's first is,
  // whatever one allocated since; within a device, buffers never overlap.
  EXPECT_EQ(two.Base(*two_first), one.Base(*one_first));
  EXPECT_GE(one.Base(*one_second), one.Base(*one_first) + one_first->size());

  const uint64_t one_before = one.device->ResidentGeneration();
  const uint64_t two_before = two.device->ResidentGeneration();
  Context ctx;
  Tensor* w = *ctx.NewTensor(DType::kF32, {4, 8});
  ASSERT_TRUE(PlaceTensor(one_first.get(), w, 0).ok());
  EXPECT_NE(one.device->ResidentGeneration(), one_before);
  EXPECT_EQ(two.device->ResidentGeneration(), two_before);
}

TEST(MetaDeviceTest, LooksUpHomesAndResidentShadows) {
  Meta meta;
  Meta other;
  std::unique_ptr<Buffer> weights = meta.Allocate(BufferUsage::kWeights);
  std::unique_ptr<Buffer> compute = meta.Allocate(BufferUsage::kCompute);
  std::unique_ptr<Buffer> foreign = other.Allocate(BufferUsage::kWeights);
  Context ctx;
  Tensor* w = *ctx.NewTensor(DType::kF32, {4, 6});
  Tensor* g = *ctx.NewTensor(DType::kF32, {4, 6});
  Tensor* f = *ctx.NewTensor(DType::kF32, {4, 6});
  Tensor* unplaced = *ctx.NewTensor(DType::kF32, {4, 6});
  ASSERT_TRUE(PlaceTensor(weights.get(), w, 0).ok());
  ASSERT_TRUE(PlaceTensor(compute.get(), g, 0).ok());
  ASSERT_TRUE(PlaceTensor(foreign.get(), f, 0).ok());
  EXPECT_EQ(meta.device->HomeOf(*w), Home::kResident);
  EXPECT_EQ(meta.device->HomeOf(*g), Home::kGraph);
  EXPECT_EQ(meta.device->HomeOf(*f), Home::kElsewhere);  // another meta device's memory.
  EXPECT_EQ(meta.device->HomeOf(*unplaced), Home::kElsewhere);

  std::optional<ShadowSet> set = meta.device->ResidentShadows(*w);
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ(set->state, SplitState::Axis(1, {{0, 3}, {3, 6}}));
  ASSERT_EQ(set->shadows.size(), 2u);
  EXPECT_EQ(set->shadows[1]->ne[1], 3);
  EXPECT_EQ(set->shadows[1]->buffer->type(), meta.device->DeviceBufferType(1));
  EXPECT_FALSE(meta.device->ResidentShadows(*g).has_value());
  EXPECT_FALSE(meta.device->ResidentShadows(*f).has_value());
}

}  // namespace
}  // namespace tg::meta
