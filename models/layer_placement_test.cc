// --split-mode layer's placement: contiguous layer ranges per device in proportion, devices
// left empty, and nonsense proportions refused.
#include "models/layer_placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "backends/cpu/cpu_device.h"

namespace tg {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class PlaceLayersTest : public ::testing::Test {
 protected:
  cpu::CpuDevice a_{"A", "a", 1};
  cpu::CpuDevice b_{"B", "b", 1};
  cpu::CpuDevice c_{"C", "c", 1};
  cpu::CpuDevice d_{"D", "d", 1};
};

TEST_F(PlaceLayersTest, ContiguousRangesInProportion) {
  LayerPlacement even = *PlaceLayers(5, {&a_, &b_}, {1, 1});
  EXPECT_THAT(even.layer_device, ElementsAreArray({0, 0, 0, 1, 1}));  // 2.5 rounds up.
  EXPECT_EQ(even.input(), &a_);
  EXPECT_EQ(even.output(), &b_);
  EXPECT_EQ(even.Describe(), "A: layers 0-2, embeddings; B: layers 3-4, output");
  LayerPlacement skewed = *PlaceLayers(6, {&a_, &b_, &c_}, {3, 1, 1});
  EXPECT_THAT(skewed.layer_device, ElementsAreArray({0, 0, 0, 0, 1, 2}));  // 3.6, 4.8, 6.
  EXPECT_EQ(skewed.UsedDevices().size(), 3u);
}

TEST_F(PlaceLayersTest, ZeroProportionOrTooManyDevicesLeaveSomeEmpty) {
  LayerPlacement zero = *PlaceLayers(4, {&a_, &b_, &c_}, {0, 1, 1});
  EXPECT_THAT(zero.layer_device, ElementsAreArray({1, 1, 2, 2}));
  EXPECT_EQ(zero.input(), &b_);
  EXPECT_THAT(zero.UsedDevices(), ElementsAreArray(std::vector<Device*>{&b_, &c_}));
  LayerPlacement many = *PlaceLayers(2, {&a_, &b_, &c_, &d_}, {1, 1, 1, 1});
  EXPECT_THAT(many.layer_device, ElementsAreArray({0, 2}));
  EXPECT_EQ(many.Describe(),
            "A: layers 0-0, embeddings; B: no layers; C: layers 1-1, output; D: no layers");
  LayerPlacement last_zero = *PlaceLayers(3, {&a_, &b_}, {1, 0});
  EXPECT_THAT(last_zero.layer_device, ElementsAreArray({0, 0, 0}));
  EXPECT_EQ(last_zero.UsedDevices().size(), 1u);
}

TEST_F(PlaceLayersTest, NonsenseIsAnError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(PlaceLayers(4, {&a_, &b_}, {1}).status().message(),
              HasSubstr("1 proportions for 2 devices"));
  EXPECT_THAT(PlaceLayers(4, {&a_, &b_}, {1, -1}).status().message(), HasSubstr("proportion -1"));
  EXPECT_FALSE(PlaceLayers(4, {&a_, &b_}, {1, nan}).ok());
  EXPECT_THAT(PlaceLayers(4, {&a_, &b_}, {0, 0}).status().message(), HasSubstr("all proportions"));
  EXPECT_THAT(PlaceLayers(4, {&a_, &a_}, {1, 1}).status().message(),
              HasSubstr("A is listed twice"));
  EXPECT_FALSE(PlaceLayers(0, {&a_}, {1}).ok());
  EXPECT_FALSE(PlaceLayers(4, {}, {}).ok());
}

}  // namespace
}  // namespace tg
