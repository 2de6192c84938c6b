#include "tools/common/weight_loading.h"

#include <gtest/gtest.h>

namespace tg {
namespace {

TEST(ParseWeightMappingTest, TakesTheThreeModesAndNamesABadValue) {
  EXPECT_EQ(*ParseWeightMapping("auto"), WeightMapping::kAuto);
  EXPECT_EQ(*ParseWeightMapping("on"), WeightMapping::kInPlace);
  EXPECT_EQ(*ParseWeightMapping("off"), WeightMapping::kCopy);
  const absl::StatusOr<WeightMapping> bad = ParseWeightMapping("yes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'yes'"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("auto, on or off"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace tg
