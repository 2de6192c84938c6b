#include "backends/cuda/copy_2d_plan.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

using Kind = Copy2DPlan::Kind;

// Runs a plan for a host-to-device copy on two host byte arrays the way the CUDA calls it
// names would (cudaMemcpy, cudaMemcpy2D, or a memcpy per row), refusing what cudaMemcpy2D
// refuses (a pitch below the width).
void RunSet(const Copy2DPlan& plan, const StridedRange& r, uint8_t* device, const uint8_t* host) {
  uint8_t* dst = device + r.offset;
  switch (plan.kind) {
    case Kind::kNone:
      return;
    case Kind::kLinear:
      std::memcpy(dst, host, plan.bytes);
      return;
    case Kind::kPitched:
      ASSERT_GE(plan.device_pitch, plan.width);
      ASSERT_GE(plan.host_pitch, plan.width);
      ASSERT_LE(plan.device_pitch, kMaxCopyPitch);
      for (size_t y = 0; y < plan.height; ++y) {
        std::memcpy(dst + y * plan.device_pitch, host + y * plan.host_pitch, plan.width);
      }
      return;
    case Kind::kRows:
      for (size_t i = 0; i < r.n_rows; ++i) {
        std::memcpy(dst + i * r.stride, host + i * r.HostStride(), r.row_size);
      }
      return;
  }
}

// The independent reference: every byte of every row, one at a time.
std::vector<uint8_t> Expected(const StridedRange& r, const std::vector<uint8_t>& host,
                              size_t device_bytes) {
  std::vector<uint8_t> out(device_bytes, 0xEE);
  for (size_t i = 0; i < r.n_rows; ++i) {
    for (size_t b = 0; b < r.row_size; ++b) {
      out[r.offset + i * r.stride + b] = host[i * r.HostStride() + b];
    }
  }
  return out;
}

TEST(Copy2DPlanTest, EveryShapeMovesTheBytesOfAHandWrittenLoop) {
  const StridedRange cases[] = {
      {0, 4, 0, 8, 0},   // no rows.
      {0, 0, 5, 8, 0},   // empty rows.
      {3, 5, 1, 0, 0},   // one row: any stride.
      {0, 6, 4, 6, 0},   // back to back on both sides.
      {0, 6, 4, 6, 10},  // packed in the tensor, strided on the host.
      {1, 3, 5, 7, 0},   // a column slice: strided in the tensor.
      {0, 3, 5, 7, 11},  // strided on both sides.
      {10, 4, 3, 9, 4},  // last row ends at the end (10 + 2*9 + 4 = 32).
  };
  for (const StridedRange& r : cases) {
    SCOPED_TRACE(testing::Message()
                 << "offset " << r.offset << " row " << r.row_size << " rows " << r.n_rows
                 << " stride " << r.stride << " host " << r.host_stride);
    const size_t device_bytes = 32;
    std::vector<uint8_t> host(64);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7 + 1);
    std::vector<uint8_t> device(device_bytes, 0xEE);
    const Copy2DPlan plan = PlanCopy2D(r);
    RunSet(plan, r, device.data(), host.data());
    EXPECT_EQ(device, Expected(r, host, device_bytes));
  }
}

TEST(Copy2DPlanTest, PicksTheCheapestCall) {
  EXPECT_EQ(PlanCopy2D({0, 4, 0, 8, 0}).kind, Kind::kNone);
  EXPECT_EQ(PlanCopy2D({0, 0, 3, 8, 0}).kind, Kind::kNone);
  const Copy2DPlan linear = PlanCopy2D({0, 16, 4, 16, 0});
  EXPECT_EQ(linear.kind, Kind::kLinear);
  EXPECT_EQ(linear.bytes, 64u);
  EXPECT_EQ(PlanCopy2D({0, 16, 1, 0, 0}).kind,
            Kind::kLinear);  // cudaMemcpy2D wants pitch >= width.
  const Copy2DPlan pitched = PlanCopy2D({0, 16, 4, 64, 0});
  EXPECT_EQ(pitched.kind, Kind::kPitched);
  EXPECT_EQ(pitched.width, 16u);
  EXPECT_EQ(pitched.height, 4u);
  EXPECT_EQ(pitched.device_pitch, 64u);
  EXPECT_EQ(pitched.host_pitch, 16u);
}

TEST(Copy2DPlanTest, PitchesBeyondTheCopyEngineGoRowByRow) {
  EXPECT_EQ(PlanCopy2D({0, 16, 4, kMaxCopyPitch + 1, 0}).kind, Kind::kRows);
  EXPECT_EQ(PlanCopy2D({0, 16, 4, 64, kMaxCopyPitch + 1}).kind, Kind::kRows);
  EXPECT_EQ(PlanCopy2D({0, 16, 4, kMaxCopyPitch, 0}).kind, Kind::kPitched);
  // A smaller limit, to see the row path move the right bytes.
  const StridedRange r{1, 3, 4, 7, 0};
  const Copy2DPlan plan = PlanCopy2D(r, /*max_pitch=*/4);
  ASSERT_EQ(plan.kind, Kind::kRows);
  std::vector<uint8_t> host(12);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(100 + i);
  std::vector<uint8_t> device(32, 0xEE);
  RunSet(plan, r, device.data(), host.data());
  EXPECT_EQ(device, Expected(r, host, 32));
}

}  // namespace
}  // namespace tg::cuda
