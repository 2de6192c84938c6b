// Placements: tensors are found by address at the index they were added with; converted
// forms are found by tensor and state; Reset forgets both.
#include "meta/placements.h"

#include "core/context.h"
#include "gtest/gtest.h"

namespace tg::meta {
namespace {

TEST(PlacementsTest, FindsTensorsAndConversionsUntilReset) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4});
  Tensor* b = *ctx.NewTensor(DType::kF32, {4});
  const SplitState cut = SplitState::Axis(0, {{0, 1}, {1, 4}});
  Placements placements;
  for (int run = 0; run < 2; ++run) {
    placements.Reset(2);
    EXPECT_EQ(placements.IndexOf(a), -1);
    placements.Add(a).state = SplitState::Partial();
    placements.Add(b);
    EXPECT_EQ(placements.IndexOf(a), 0);
    EXPECT_EQ(placements.IndexOf(b), 1);
    EXPECT_TRUE(placements.Of(a).state.is_partial());
    EXPECT_TRUE(placements.Of(b).state.is_mirrored());
    EXPECT_EQ(placements.size(), 2u);

    EXPECT_EQ(placements.Converted(a, cut), nullptr);
    const Placement* c = placements.AddConverted(a, Placement{cut});
    EXPECT_EQ(placements.Converted(a, cut), c);
    EXPECT_EQ(placements.Converted(b, cut), nullptr);
    EXPECT_EQ(placements.Converted(a, SplitState::Mirrored()), nullptr);
  }
}

}  // namespace
}  // namespace tg::meta
