// MetaBuffer::LoadTensors: a weight loaded from a file (each device's share as its own load,
// rows of the file for a cut along an inner dimension) leaves every device's shadow holding
// what SetTensor of the same bytes (the scatter path, an independent reference) leaves there,
// for each split kind: mirrored, cuts along dimensions 0, 1 and 2, segmented pieces, and a
// device holding nothing. The stats name each device's buffers and count their bytes.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "core/load_weights.h"
#include "gtest/gtest.h"
#include "meta/meta_buffer.h"
#include "meta/meta_device.h"

namespace tg::meta {
namespace {

struct Case {
  const char* name;
  DType type;
  std::vector<int64_t> ne;
  SplitState state;
};

std::vector<Case> Cases() {
  return {
      {"mirrored", DType::kF32, {8, 6}, SplitState::Mirrored()},
      {"rows", DType::kF32, {8, 6}, SplitState::Axis(1, {{0, 4}, {4, 5}, {5, 6}})},
      {"columns_q8_0", DType::kQ8_0, {128, 5}, SplitState::Axis(0, {{0, 64}, {64, 96}, {96, 128}})},
      {"experts", DType::kF32, {4, 3, 6}, SplitState::Axis(2, {{0, 2}, {2, 2}, {2, 6}})},
      {"segmented",
       DType::kF32,
       {4, 9},
       SplitState::Segmented(1, {{{0, 2}, {3, 4}, {6, 8}}, {{2, 3}, {4, 6}}, {{8, 9}}})},
  };
}

std::vector<uint8_t> Bytes(size_t n, int seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 31 + seed);
  return b;
}

// Each device's shadow bytes of t.
std::vector<std::vector<uint8_t>> ShadowBytes(const MetaBuffer& buffer, const Tensor* t) {
  std::vector<std::vector<uint8_t>> out;
  const std::optional<ShadowSet> set = buffer.Shadows(t);  // held: the loop reads into it.
  if (!set.has_value()) {
    ADD_FAILURE() << "no shadows";
    return out;
  }
  for (Tensor* s : set->shadows) {
    out.emplace_back();
    if (s == nullptr) continue;
    out.back().resize(s->NumBytes());
    EXPECT_TRUE(s->buffer->GetTensor(s, out.back().data(), 0, s->NumBytes()).ok());
  }
  return out;
}

TEST(MetaBufferLoadTest, EachDeviceGetsWhatTheScatterGives) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    cpu::CpuDevice a{"A", "a", 1}, b{"B", "b", 1}, d3{"C", "c", 1};
    std::unique_ptr<MetaDevice> device = *MetaDevice::Create(
        {&a, &b, &d3}, [&](const Tensor&) -> absl::StatusOr<SplitState> { return c.state; });
    auto make = [&](Context* ctx) {
      std::unique_ptr<Buffer> buffer = *device->default_buffer_type()->Allocate(1 << 16);
      buffer->set_usage(BufferUsage::kWeights);
      Tensor* t = *ctx->NewTensor(c.type, c.ne);
      EXPECT_TRUE(PlaceTensor(buffer.get(), t, 0).ok());
      return std::make_pair(std::move(buffer), t);
    };
    Context ctx_loaded, ctx_set;
    auto [loaded, t_loaded] = make(&ctx_loaded);
    auto [set, t_set] = make(&ctx_set);
    const size_t n = t_loaded->NumBytes();
    // A "file": 40 bytes of header, then the tensor at an odd offset.
    std::vector<uint8_t> file = Bytes(40 + n + 16, 5);
    const uint64_t at = 40;
    WeightSource source;
    source.path = "test.gguf";
    source.mapping = file;
    source.header_bytes = 40;
    ASSERT_TRUE(set->SetTensor(t_set, file.data() + at, 0, n).ok());
    absl::StatusOr<std::vector<LoadStats>> stats =
        LoadWeights(source, {WholeTensorLoad(t_loaded, at, n)});
    ASSERT_TRUE(stats.ok()) << stats.status();
    auto* ml = static_cast<MetaBuffer*>(loaded.get());
    EXPECT_EQ(ShadowBytes(*ml, t_loaded), ShadowBytes(*static_cast<MetaBuffer*>(set.get()), t_set));
    uint64_t bytes = 0;
    for (const LoadStats& s : *stats) {
      EXPECT_NE(s.buffer, loaded.get());  // the devices' buffers, not the meta buffer.
      bytes += s.bytes;
    }
    uint64_t held = 0;
    for (const TensorPart& p : ml->Parts(*t_loaded)) held += p.bytes;
    EXPECT_EQ(bytes, held);
    std::vector<uint8_t> back(n);
    ASSERT_TRUE(ml->GetTensor(t_loaded, back.data(), 0, n).ok());
    EXPECT_EQ(0, std::memcmp(back.data(), file.data() + at, n));
  }
}

TEST(MetaBufferLoadTest, ALoadPastTheFileIsRefused) {
  cpu::CpuDevice a{"A", "a", 1}, b{"B", "b", 1};
  std::unique_ptr<MetaDevice> device =
      *MetaDevice::Create({&a, &b}, [](const Tensor&) -> absl::StatusOr<SplitState> {
        return SplitState::Axis(1, {{0, 2}, {2, 4}});
      });
  std::unique_ptr<Buffer> buffer = *device->default_buffer_type()->Allocate(1 << 12);
  buffer->set_usage(BufferUsage::kWeights);
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {4, 4});
  ASSERT_TRUE(PlaceTensor(buffer.get(), t, 0).ok());
  std::vector<uint8_t> file(60);
  WeightSource source;
  source.mapping = file;
  absl::StatusOr<std::vector<LoadStats>> stats =
      LoadWeights(source, {WholeTensorLoad(t, 0, t->NumBytes())});
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kOutOfRange) << stats.status();
}

}  // namespace
}  // namespace tg::meta
