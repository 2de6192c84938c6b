// Buffer::SetTensor2D/GetTensor2D: the default loop over the 1D calls (core/backend.h) and
// the CPU buffer's strided memcpy both move exactly the bytes a hand-written per-byte loop
// does, for every edge (no rows, packed rows, a host stride, the last row ending at the
// tensor's end), and refuse what lies outside the tensor before touching a byte.
#include "core/strided_range.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/context.h"
#include "tests/lib/strided_reference.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

constexpr size_t kTensorBytes = 256;  // a 16 x 4 f32 tensor.
constexpr uint8_t kUntouched = 0xEE;

struct Placed {
  Context ctx;
  std::unique_ptr<Buffer> buffer;
  Tensor* t = nullptr;
};

// A 16 x 4 f32 tensor placed at byte 64 of a 384-byte buffer filled with kUntouched;
// `row_by_row` wraps the CPU buffer so that its 2D calls are the default loop.
std::unique_ptr<Placed> Place(bool row_by_row) {
  auto p = std::make_unique<Placed>();
  BufferType* type = testing::CpuDevice()->default_buffer_type();
  std::unique_ptr<Buffer> cpu = *type->Allocate(384);
  if (row_by_row) {
    cpu = std::make_unique<testing::ForwardingBuffer>(std::move(cpu), nullptr,
                                                      /*native_2d=*/false);
  }
  p->buffer = std::move(cpu);
  EXPECT_TRUE(p->buffer->Clear(kUntouched).ok());
  p->t = *p->ctx.NewTensor(DType::kF32, {16, 4});
  p->t->SetName("t");
  EXPECT_TRUE(PlaceTensor(p->buffer.get(), p->t, 64).ok());
  return p;
}

std::vector<uint8_t> Untouched() { return std::vector<uint8_t>(kTensorBytes, kUntouched); }

std::vector<uint8_t> ReadAll(const Placed& p) {
  std::vector<uint8_t> bytes(kTensorBytes);
  EXPECT_TRUE(p.buffer->GetTensor(p.t, bytes.data(), 0, bytes.size()).ok());
  return bytes;
}

struct Case {
  const char* what;
  StridedRange r;
};

const Case kCases[] = {
    {"no rows", {0, 16, 0, 64, 0}},
    {"empty rows", {8, 0, 4, 64, 0}},
    {"one row", {12, 20, 1, 0, 0}},
    {"packed rows (stride == row size)", {16, 32, 5, 32, 0}},
    {"a column slice of every row", {8, 24, 4, 64, 0}},
    {"a column slice to a host stride", {4, 12, 4, 64, 40}},
    {"the last row ends at the tensor's end", {40, 24, 4, 64, 0}},
    {"the whole tensor as one row", {0, 256, 1, 256, 0}},
};

class StridedBufferTest : public ::testing::TestWithParam<bool> {};

TEST_P(StridedBufferTest, SetMovesTheBytesOfAByteLoop) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    auto p = Place(GetParam());
    const std::vector<uint8_t> host = testing::BytePattern(512, 1);
    ASSERT_TRUE(p->buffer->SetTensor2D(p->t, host.data(), c.r).ok());
    EXPECT_EQ(ReadAll(*p), testing::ReferenceSetRows(c.r, Untouched(), host));
  }
}

TEST_P(StridedBufferTest, GetMovesTheBytesOfAByteLoop) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    auto p = Place(GetParam());
    const std::vector<uint8_t> tensor = testing::BytePattern(kTensorBytes, 2);
    ASSERT_TRUE(p->buffer->SetTensor(p->t, tensor.data(), 0, tensor.size()).ok());
    std::vector<uint8_t> host(512, kUntouched);
    ASSERT_TRUE(p->buffer->GetTensor2D(p->t, host.data(), c.r).ok());
    EXPECT_EQ(host, testing::ReferenceGetRows(c.r, tensor, host.size(), kUntouched));
  }
}

TEST_P(StridedBufferTest, TheStreamFormsMoveTheSameBytes) {
  const StridedRange r{4, 12, 4, 64, 40};
  auto p = Place(GetParam());
  std::unique_ptr<Stream> stream = *testing::CpuDevice()->CreateStream();
  const std::vector<uint8_t> host = testing::BytePattern(512, 3);
  ASSERT_TRUE(stream->SetTensor2DAsync(p->t, host.data(), r).ok());
  std::vector<uint8_t> back(512, kUntouched);
  ASSERT_TRUE(stream->GetTensor2DAsync(p->t, back.data(), r).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  const std::vector<uint8_t> want = testing::ReferenceSetRows(r, Untouched(), host);
  EXPECT_EQ(ReadAll(*p), want);
  EXPECT_EQ(back, testing::ReferenceGetRows(r, want, back.size(), kUntouched));
}

TEST_P(StridedBufferTest, RangesOutsideTheTensorAreRefusedBeforeAnyByteMoves) {
  struct Bad {
    const char* what;
    StridedRange r;
    absl::StatusCode code;
    const char* names;  // a value the message must name.
  };
  const Bad bad[] = {
      {"the last row one byte past the end",
       {41, 24, 4, 64, 0},
       absl::StatusCode::kOutOfRange,
       "257"},
      {"an offset past the end", {300, 4, 0, 8, 0}, absl::StatusCode::kOutOfRange, "300"},
      {"overlapping rows", {0, 32, 3, 16, 0}, absl::StatusCode::kInvalidArgument, "stride of 16"},
      {"overlapping host rows",
       {0, 32, 3, 64, 16},
       absl::StatusCode::kInvalidArgument,
       "host stride of 16"},
      {"a span that overflows",
       {0, 8, SIZE_MAX / 2, 16, 0},
       absl::StatusCode::kInvalidArgument,
       "overflow"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    auto p = Place(GetParam());
    const std::vector<uint8_t> host = testing::BytePattern(512, 4);
    const absl::Status set = p->buffer->SetTensor2D(p->t, host.data(), b.r);
    EXPECT_EQ(set.code(), b.code) << set;
    EXPECT_NE(std::string(set.message()).find(b.names), std::string::npos) << set;
    EXPECT_EQ(ReadAll(*p), std::vector<uint8_t>(kTensorBytes, kUntouched));
    std::vector<uint8_t> out(512, kUntouched);
    EXPECT_EQ(p->buffer->GetTensor2D(p->t, out.data(), b.r).code(), b.code);
    EXPECT_EQ(out, std::vector<uint8_t>(512, kUntouched));
  }
}

INSTANTIATE_TEST_SUITE_P(DefaultLoopAndCpu, StridedBufferTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("DefaultLoop") : std::string("Cpu");
                         });

TEST(StridedBufferTest, TheDefaultIsOneOneDimensionalCallPerRow) {
  auto p = Place(/*row_by_row=*/true);
  auto* loop = static_cast<testing::ForwardingBuffer*>(p->buffer.get());
  const std::vector<uint8_t> host = testing::BytePattern(512, 5);
  ASSERT_TRUE(p->buffer->SetTensor2D(p->t, host.data(), {8, 24, 4, 64, 0}).ok());
  EXPECT_EQ(loop->calls_1d, 4);
}

TEST(StridedRangeTest, SpansAndPackedBytes) {
  EXPECT_EQ(*TensorSpan({0, 24, 4, 64, 0}), 3u * 64 + 24);
  EXPECT_EQ(*HostSpan({0, 24, 4, 64, 0}), 4u * 24);
  EXPECT_EQ(*HostSpan({0, 24, 4, 64, 30}), 3u * 30 + 24);
  EXPECT_EQ(*TensorSpan({0, 24, 0, 64, 0}), 0u);
  EXPECT_EQ(*TensorSpan({0, 24, 1, 0, 0}), 24u);  // one row: the stride does not matter.
  EXPECT_EQ(*PackedBytes({0, 24, 4, 64, 0}), 96u);
  EXPECT_FALSE(PackedBytes({0, SIZE_MAX / 2, 3, SIZE_MAX, 0}).ok());
  EXPECT_FALSE(TensorSpan({0, 1, SIZE_MAX, 2, 0}).ok());
}

// The byte offsets of every element of t, walked through its four strides.
std::vector<size_t> ElementBytes(const Tensor& t) {
  std::vector<size_t> out;
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t.ne[0]; ++i0)
          for (size_t b = 0; b < 4; ++b) {
            out.push_back(i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3] + b);
          }
  return out;
}

std::vector<size_t> RowBytesOf(const StridedRange& r) {
  std::vector<size_t> out;
  for (size_t i = 0; i < r.n_rows; ++i)
    for (size_t b = 0; b < r.row_size; ++b) out.push_back(r.offset + i * r.stride + b);
  return out;
}

Tensor F32(std::array<int64_t, 4> ne, std::array<size_t, 4> nb) {
  Tensor t;
  t.type = DType::kF32;
  for (int i = 0; i < 4; ++i) {
    t.ne[i] = ne[i];
    t.nb[i] = nb[i];
  }
  return t;
}

TEST(StridedRangeTest, TensorRowsCoverExactlyTheElementsOfAView) {
  const Tensor folds[] = {
      F32({16, 4, 1, 1}, {4, 64, 256, 256}),  // contiguous.
      F32({6, 3, 1, 1}, {4, 64, 192, 192}),   // a column slice.
      F32({6, 3, 2, 1}, {4, 64, 192, 384}),   // dims 1 and 2 fold: 6 rows 64 bytes apart.
      F32({6, 1, 5, 1}, {4, 64, 100, 500}),   // dim 1 of one: dim 2 gives the stride.
      F32({5, 1, 1, 1}, {4, 0, 0, 0}),        // one row.
  };
  for (const Tensor& t : folds) {
    SCOPED_TRACE(DescribeTensor(t));
    std::optional<StridedRange> r = TensorRows(t);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(RowBytesOf(*r), ElementBytes(t));
  }
  EXPECT_TRUE(TensorRows(folds[0])->TensorContiguous());
  EXPECT_FALSE(TensorRows(folds[1])->TensorContiguous());
  const Tensor no_fold[] = {
      F32({6, 3, 2, 1}, {4, 64, 256, 512}),  // a gap between dim-2 blocks.
      F32({4, 4, 1, 1}, {16, 4, 64, 64}),    // transposed: elements not back to back.
      F32({8, 3, 1, 1}, {4, 0, 0, 0}),       // broadcast rows overlap.
  };
  for (const Tensor& t : no_fold) EXPECT_FALSE(TensorRows(t).has_value()) << DescribeTensor(t);
}

}  // namespace
}  // namespace tg
