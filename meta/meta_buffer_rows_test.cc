// MetaBuffer's partial reads and writes of a tensor split along dimension 0 (a KV cache by
// heads): whole rows go to and from each device's slice in place, and the result equals a
// plain byte array's (the independent path); the devices' slices hold exactly their columns
// of the rows written and nothing else changes. Other ranges still work (read, modify, write
// the whole tensor).
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "gtest/gtest.h"
#include "meta/meta_buffer.h"
#include "meta/meta_device.h"

namespace tg::meta {
namespace {

class MetaBufferRowsTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    // 3 devices, dimension 0 cut into 2, 1 and 1 blocks of the type (a KV head of 32 each).
    device_ =
        *MetaDevice::Create({&a_, &b_, &c_}, [](const Tensor& t) -> absl::StatusOr<SplitState> {
          const int64_t q = t.ne[0] / 4;
          return SplitState::Axis(0, {{0, 2 * q}, {2 * q, 3 * q}, {3 * q, 4 * q}});
        });
    buffer_ = *device_->default_buffer_type()->Allocate(1 << 20);
    buffer_->set_usage(BufferUsage::kWeights);
    t_ = *ctx_.NewTensor(GetParam(), {128, 10});  // 10 rows ("cells").
    ASSERT_TRUE(PlaceTensor(buffer_.get(), t_, 0).ok());
    expected_.resize(t_->NumBytes());
    for (size_t i = 0; i < expected_.size(); ++i) expected_[i] = static_cast<uint8_t>(i * 7 + 3);
    ASSERT_TRUE(buffer_->SetTensor(t_, expected_.data(), 0, expected_.size()).ok());
  }

  std::vector<uint8_t> ReadAll() {
    std::vector<uint8_t> all(t_->NumBytes());
    EXPECT_TRUE(buffer_->GetTensor(t_, all.data(), 0, all.size()).ok());
    return all;
  }

  cpu::CpuDevice a_{"A", "a", 1}, b_{"B", "b", 1}, c_{"C", "c", 1};
  std::unique_ptr<MetaDevice> device_;
  std::unique_ptr<Buffer> buffer_;
  Context ctx_;
  Tensor* t_ = nullptr;
  std::vector<uint8_t> expected_;
};

TEST_P(MetaBufferRowsTest, WholeRowsReadAndWriteEachSliceInPlace) {
  const size_t row = t_->nb[1];
  std::vector<uint8_t> rows(3 * row);
  ASSERT_TRUE(buffer_->GetTensor(t_, rows.data(), 4 * row, rows.size()).ok());
  EXPECT_EQ(0, std::memcmp(rows.data(), expected_.data() + 4 * row, rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint8_t>(255 - i);
  ASSERT_TRUE(buffer_->SetTensor(t_, rows.data(), 6 * row, rows.size()).ok());
  std::memcpy(expected_.data() + 6 * row, rows.data(), rows.size());
  EXPECT_EQ(ReadAll(), expected_);
  // Each device holds its columns of every row: device 1's slice starts at half a row.
  std::optional<ShadowSet> set = device_->ResidentShadows(*t_);
  ASSERT_TRUE(set.has_value());
  const Tensor* s1 = set->shadows[1];
  std::vector<uint8_t> slice(s1->nb[1]);
  ASSERT_TRUE(s1->buffer->GetTensor(s1, slice.data(), 7 * s1->nb[1], slice.size()).ok());
  EXPECT_EQ(0, std::memcmp(slice.data(), expected_.data() + 7 * row + row / 2, slice.size()));
}

TEST_P(MetaBufferRowsTest, PartsOfRowsStillReadModifyWrite) {
  const size_t row = t_->nb[1];
  const size_t offset = row + BlockBytes(t_->type), size = row;  // straddles two rows.
  std::vector<uint8_t> bytes(size, 0x5a);
  ASSERT_TRUE(buffer_->SetTensor(t_, bytes.data(), offset, size).ok());
  std::memcpy(expected_.data() + offset, bytes.data(), size);
  EXPECT_EQ(ReadAll(), expected_);
  std::vector<uint8_t> back(size);
  ASSERT_TRUE(buffer_->GetTensor(t_, back.data(), offset, size).ok());
  EXPECT_EQ(back, bytes);
}

INSTANTIATE_TEST_SUITE_P(Types, MetaBufferRowsTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kQ8_0));

}  // namespace
}  // namespace tg::meta
