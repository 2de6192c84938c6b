#include "core/enum_names.h"

#include "gtest/gtest.h"

namespace tg {
namespace {

// Values out of declaration order and with a gap, so that a table indexed by value would fail.
enum class Color { kRed = 3, kGreen = 0, kBlue = 7, kUnnamed = 9 };

constexpr EnumName<Color> kColors[] = {
    {Color::kRed, "red"}, {Color::kGreen, "green"}, {Color::kBlue, "blue"}};

TEST(EnumNamesTest, NameOfFindsEachValueAndFallsBackForOneWithoutAName) {
  EXPECT_STREQ(NameOf(kColors, Color::kRed), "red");
  EXPECT_STREQ(NameOf(kColors, Color::kGreen), "green");
  EXPECT_STREQ(NameOf(kColors, Color::kBlue), "blue");
  EXPECT_STREQ(NameOf(kColors, Color::kUnnamed), "?");
  EXPECT_STREQ(NameOf(kColors, Color::kUnnamed, "none"), "none");
}

TEST(EnumNamesTest, ValueOfIsTheInverseAndRejectsNearMisses) {
  for (const EnumName<Color>& entry : kColors) {
    ASSERT_TRUE(ValueOf(kColors, entry.name).has_value()) << entry.name;
    EXPECT_EQ(*ValueOf(kColors, entry.name), entry.value);
  }
  EXPECT_FALSE(ValueOf(kColors, "Red").has_value());
  EXPECT_FALSE(ValueOf(kColors, "re").has_value());
  EXPECT_FALSE(ValueOf(kColors, "").has_value());
}

TEST(EnumNamesTest, NameListKeepsTableOrder) {
  EXPECT_EQ(NameList(kColors), "red, green, blue");
  EXPECT_EQ(NameList(kColors, " "), "red green blue");
  constexpr EnumName<Color> kOne[] = {{Color::kBlue, "blue"}};
  EXPECT_EQ(NameList(kOne), "blue");
}

TEST(EnumNamesTest, WorksAtCompileTime) {
  static_assert(NameOf(kColors, Color::kBlue)[0] == 'b');
  static_assert(*ValueOf(kColors, "green") == Color::kGreen);
}

}  // namespace
}  // namespace tg
