// KvCells: free cells lowest first, a full cache named with its counts, sequences leaving
// (shared cells stay while a holder remains), shared prefixes, and what a token attends.
#include "models/kv_cells.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace tg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(KvCellsTest, FindsFreeCellsLowestFirstAndSaysWhenTooFew) {
  KvCells cells(6);
  EXPECT_EQ(cells.end(), 0);
  const std::vector<int32_t> first = *cells.FindFree(3, 0);
  for (int32_t c : first) cells.Assign(c, 0, c);
  cells.Assign(4, 1, 0);
  EXPECT_EQ(cells.used(), 4);
  EXPECT_EQ(cells.end(), 5);
  EXPECT_THAT(*cells.FindFree(2, 1), ElementsAre(3, 5));
  const absl::Status full = cells.FindFree(3, 1).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(full.message()),
              HasSubstr("sequence 1 needs 3 cells, 2 of 6 are free"));
  cells.Remove(0);
  EXPECT_EQ(cells.used(), 1);
  EXPECT_THAT(*cells.FindFree(3, 2), ElementsAre(0, 1, 2));
}

TEST(KvCellsTest, ATokenSeesItsOwnSequenceUpToItsPosition) {
  KvCells cells(8);
  for (int32_t p = 0; p < 4; ++p) cells.Assign(p, 0, p);      // sequence 0 at 0..3.
  for (int32_t p = 0; p < 3; ++p) cells.Assign(4 + p, 1, p);  // sequence 1 at 0..2.
  EXPECT_TRUE(cells.Visible(2, 0, 2));
  EXPECT_FALSE(cells.Visible(3, 0, 2));  // a later position.
  EXPECT_FALSE(cells.Visible(4, 0, 3));  // another sequence's cell.
  EXPECT_TRUE(cells.Visible(6, 1, 2));
  // A sliding window of 2 positions: position 3 sees 2 and 3 only.
  EXPECT_FALSE(cells.Visible(1, 0, 3, 2));
  EXPECT_TRUE(cells.Visible(2, 0, 3, 2));
  EXPECT_THAT(cells.CellsOf(1), ElementsAre(4, 5, 6));
}

TEST(KvCellsTest, ASharedPrefixStaysWhileOneHolderRemains) {
  KvCells cells(8);
  for (int32_t p = 0; p < 5; ++p) cells.Assign(p, 0, p);
  cells.SharePrefix(0, 3, 3);  // sequence 3 holds positions 0..2 of sequence 0.
  EXPECT_THAT(cells.CellsOf(3), ElementsAre(0, 1, 2));
  EXPECT_TRUE(cells.Visible(1, 3, 7));
  EXPECT_FALSE(cells.Visible(3, 3, 7));
  cells.Remove(0);
  EXPECT_EQ(cells.used(), 3);  // the prefix, now sequence 3's alone.
  EXPECT_THAT(cells.CellsOf(0), ElementsAre());
  EXPECT_THAT(*cells.FindFree(2, 0), ElementsAre(3, 4));
  cells.Remove(3);
  EXPECT_EQ(cells.used(), 0);
  EXPECT_EQ(cells.end(), 0);
}

}  // namespace
}  // namespace tg
