// LoadWeights and Buffer::LoadTensors's default: every load lands where it says (whole
// tensors, and rows of the file into rows of a tensor, checked against a naive byte loop),
// each buffer's LoadTensors is called once with its own loads, loads past the file or of
// unplaced tensors are refused naming them, and a CPU buffer over host memory (FromHostPtr)
// reads in place and refuses writes.
#include "core/load_weights.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "gtest/gtest.h"

namespace tg {
namespace {

// A CPU buffer that records the loads it was given.
class CountingBuffer : public cpu::CpuBuffer {
 public:
  using CpuBuffer::CpuBuffer;
  absl::StatusOr<std::vector<LoadStats>> LoadTensors(const WeightSource& source,
                                                     absl::Span<const TensorLoad> loads) override {
    ++calls;
    n_loads += loads.size();
    return CpuBuffer::LoadTensors(source, loads);
  }
  int calls = 0;
  size_t n_loads = 0;
};

std::unique_ptr<CountingBuffer> NewBuffer(cpu::CpuDevice* device, size_t size) {
  void* data = std::aligned_alloc(cpu::kCpuAlignment, size);
  return std::make_unique<CountingBuffer>(device->default_buffer_type(), data, size);
}

TEST(LoadWeightsTest, WholeAndStridedLoadsLandOncePerBuffer) {
  cpu::CpuDevice device("CPU", "cpu", 1);
  std::unique_ptr<CountingBuffer> b1 = NewBuffer(&device, 4096), b2 = NewBuffer(&device, 4096);
  Context ctx;
  Tensor* w1 = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* w2 = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* w3 = *ctx.NewTensor(DType::kF32, {4, 4});
  ASSERT_TRUE(PlaceTensor(b1.get(), w1, 0).ok());
  ASSERT_TRUE(PlaceTensor(b1.get(), w2, 256).ok());
  ASSERT_TRUE(PlaceTensor(b2.get(), w3, 0).ok());
  std::vector<uint8_t> file(1000);
  for (size_t i = 0; i < file.size(); ++i) file[i] = static_cast<uint8_t>(i * 13 + 1);
  WeightSource source;
  source.mapping = file;
  std::atomic<uint64_t> placed{0};
  source.on_placed = [&](uint64_t bytes) { placed += bytes; };  // from each buffer's thread.
  // w3 gets columns 4..7 of an 8x4 f32 matrix at file byte 300: 4 rows of 16 bytes, 32 apart.
  TensorLoad rows{
      w3, 300 + 16,
      StridedRange{.offset = 0, .row_size = 16, .n_rows = 4, .stride = 16, .host_stride = 32}};
  absl::StatusOr<std::vector<LoadStats>> stats = LoadWeights(
      source, {WholeTensorLoad(w1, 10, w1->NumBytes()), rows, WholeTensorLoad(w2, 500, 128)});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(b1->calls, 1);
  EXPECT_EQ(b1->n_loads, 2u);
  EXPECT_EQ(b2->calls, 1);
  ASSERT_EQ(stats->size(), 2u);
  EXPECT_EQ((*stats)[0].buffer, b1.get());
  EXPECT_EQ((*stats)[0].bytes, 256u);
  EXPECT_EQ((*stats)[1].bytes, 64u);
  EXPECT_EQ(placed.load(), 320u);
  EXPECT_EQ(0, std::memcmp(w1->data, file.data() + 10, 128));
  EXPECT_EQ(0, std::memcmp(w2->data, file.data() + 500, 128));
  const auto* got = static_cast<const uint8_t*>(w3->data);
  for (size_t r = 0; r < 4; ++r) {
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(got[r * 16 + i], file[316 + r * 32 + i]);
  }
}

TEST(LoadWeightsTest, LoadsPastTheFileOrOfUnplacedTensorsAreRefused) {
  cpu::CpuDevice device("CPU", "cpu", 1);
  std::unique_ptr<CountingBuffer> b = NewBuffer(&device, 4096);
  Context ctx;
  Tensor* w = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* unplaced = *ctx.NewTensor(DType::kF32, {8, 4});
  ASSERT_TRUE(PlaceTensor(b.get(), w, 0).ok());
  std::vector<uint8_t> file(200);
  WeightSource source;
  source.path = "m.gguf";
  source.mapping = file;
  absl::Status past = LoadWeights(source, {WholeTensorLoad(w, 100, 128)}).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
  EXPECT_NE(past.message().find("m.gguf"), absl::string_view::npos) << past;
  absl::Status none = LoadWeights(source, {WholeTensorLoad(unplaced, 0, 128)}).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << none;
}

TEST(LoadWeightsTest, AHostPointerBufferReadsInPlaceAndRefusesWrites) {
  cpu::CpuDevice device("CPU", "cpu", 1);
  alignas(64) static uint8_t memory[256];
  for (size_t i = 0; i < sizeof(memory); ++i) memory[i] = static_cast<uint8_t>(i);
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      device.default_buffer_type()->FromHostPtr(memory, sizeof(memory));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(device.default_buffer_type()->FromHostPtr(memory + 1, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {8});
  ASSERT_TRUE(PlaceTensor(buffer->get(), t, 32).ok());  // GGUF's alignment is enough.
  EXPECT_EQ(t->data, memory + 32);
  float f[8];
  ASSERT_TRUE((*buffer)->GetTensor(t, f, 0, sizeof(f)).ok());
  EXPECT_EQ(0, std::memcmp(f, memory + 32, sizeof(f)));
  EXPECT_EQ((*buffer)->SetTensor(t, f, 0, sizeof(f)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*buffer)->Clear(0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(memory[40], 40);
}

}  // namespace
}  // namespace tg
