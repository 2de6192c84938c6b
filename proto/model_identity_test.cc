// SplitIntoPieces against pieces written out by hand, and IdentityOf against the published
// SHA-256 test vector.
#include "proto/model_identity.h"

#include <vector>

#include "gtest/gtest.h"

namespace tg::rpc {
namespace {

constexpr uint64_t P = kPieceBytes;

TEST(ModelIdentityTest, TensorsAreCutIntoPiecesFromTheirStart) {
  const std::vector<FileRange> tensors = {
      {5 * P, P + 1},                 // listed out of order on purpose.
      {100, 10},          {200, 0},   // an empty tensor gives no piece.
      {1000, P},          {100, 10},  // a tied weight listed twice gives its pieces once.
      {10 * P, 3 * P - 5}};
  const std::vector<FileRange> want = {{100, 10},   {1000, P},   {5 * P, P},     {6 * P, 1},
                                       {10 * P, P}, {11 * P, P}, {12 * P, P - 5}};
  EXPECT_EQ(SplitIntoPieces(tensors), want);
}

TEST(ModelIdentityTest, IdentityIsSizeAndTheHeaderHash) {
  const uint8_t abc[] = {'a', 'b', 'c'};
  const ModelIdentity id = IdentityOf(abc, 12345);
  EXPECT_EQ(id.size, 12345u);
  // FIPS 180-2, appendix B.1.
  EXPECT_EQ(DigestHex(id.header),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_NE(id, IdentityOf(abc, 12346));
  EXPECT_NE(id, IdentityOf(absl::MakeConstSpan(abc, 2), 12345));
}

}  // namespace
}  // namespace tg::rpc
