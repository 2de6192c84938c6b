// PlanTape: a replay hands back the recorded tensors, refreshed where shapes changed, and
// notices a graph of another structure.
#include "meta/plan_tape.h"

#include <vector>

#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "meta/partition_testing.h"

namespace tg::meta {
namespace {

// The recorded (or replayed) tensors of a small plan: a blank [8, n], its CONT, and a
// reshape of that into [4, 2n].
struct Made {
  Tensor* blank = nullptr;
  Tensor* cont = nullptr;
  Tensor* reshaped = nullptr;
};

absl::StatusOr<Made> MakePlan(PlanTape& tape, int64_t n);

// Records MakePlan(3), then starts a replay and replays its blank as [8, n] and that
// blank's CONT; returns the CONT.
Tensor* ReplayCont(PlanTape& tape, int64_t n) {
  tape.Begin(/*replay=*/false);
  EXPECT_TRUE(MakePlan(tape, 3).ok());
  tape.Begin(/*replay=*/true);
  const int64_t ne[kMaxDims] = {8, n, 1, 1};
  Tensor* blank = *tape.NewBlank(DType::kF32, ne);
  Tensor* const in[1] = {blank};
  return *tape.NewNode(Op::kCont, in, {});
}

absl::StatusOr<Made> MakePlan(PlanTape& tape, int64_t n) {
  Made m;
  const int64_t ne[kMaxDims] = {8, n, 1, 1};
  TG_ASSIGN_OR_RETURN(m.blank, tape.NewBlank(DType::kF32, ne));
  Tensor* const in[1] = {m.blank};
  TG_ASSIGN_OR_RETURN(m.cont, tape.NewNode(Op::kCont, in, {}));
  const int64_t to[kMaxDims] = {4, 2 * n, 1, 1};
  TG_ASSIGN_OR_RETURN(m.reshaped, tape.NewReshape(m.cont, to));
  return m;
}

TEST(PlanTapeTest, ReplayRefreshesTheRecordedTensors) {
  PlanTape tape;
  tape.Begin(/*replay=*/false);
  absl::StatusOr<Made> first = MakePlan(tape, 3);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(tape.End().ok());
  EXPECT_EQ(tape.size(), 3u);
  EXPECT_EQ(ShapeOf(first->reshaped), (std::vector<int64_t>{4, 6, 1, 1}));

  for (int64_t n : {3, 5, 2}) {
    tape.Begin(/*replay=*/true);
    absl::StatusOr<Made> again = MakePlan(tape, n);
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_TRUE(tape.End().ok());
    EXPECT_EQ(again->blank, first->blank);
    EXPECT_EQ(again->cont, first->cont);
    EXPECT_EQ(again->reshaped, first->reshaped);
    // The blank's new shape reaches what is made from it.
    EXPECT_EQ(ShapeOf(again->cont), (std::vector<int64_t>{8, n, 1, 1})) << n;
    EXPECT_EQ(again->cont->nb[1], 8 * sizeof(float));
    EXPECT_EQ(ShapeOf(again->reshaped), (std::vector<int64_t>{4, 2 * n, 1, 1})) << n;
    EXPECT_EQ(tape.size(), 3u);
  }
}

TEST(PlanTapeTest, AnotherStructureIsAMismatch) {
  PlanTape tape;
  tape.Begin(false);
  ASSERT_TRUE(MakePlan(tape, 3).ok());
  ASSERT_TRUE(tape.End().ok());

  // Another op on the recorded blank.
  tape.Begin(true);
  const int64_t ne[kMaxDims] = {8, 3, 1, 1};
  Tensor* blank = *tape.NewBlank(DType::kF32, ne);
  Tensor* const in[1] = {blank};
  absl::StatusOr<Tensor*> silu = tape.NewNode(Op::kSilu, in, {});
  EXPECT_EQ(silu.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(tape.mismatch());

  // Fewer tensors than recorded.
  tape.Begin(true);
  EXPECT_FALSE(tape.mismatch());
  ASSERT_TRUE(tape.NewBlank(DType::kF32, ne).ok());
  EXPECT_EQ(tape.End().code(), absl::StatusCode::kAborted);

  // More tensors than recorded.
  tape.Begin(true);
  ASSERT_TRUE(MakePlan(tape, 3).ok());
  EXPECT_EQ(tape.NewBlank(DType::kF32, ne).status().code(), absl::StatusCode::kAborted);
}

// A failed shape rule takes nothing from the tape: the caller may retry another way (the
// shadow builder packs a strided source and asks again).
TEST(PlanTapeTest, AFailedRuleTakesNothing) {
  PlanTape tape;
  Tensor* cont = ReplayCont(tape, 3);
  const int64_t bad[kMaxDims] = {5, 5, 1, 1};
  absl::StatusOr<Tensor*> wrong = tape.NewReshape(cont, bad);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(tape.mismatch());
  const int64_t good[kMaxDims] = {4, 6, 1, 1};
  EXPECT_TRUE(tape.NewReshape(cont, good).ok());
  EXPECT_TRUE(tape.End().ok());
}

// SetFlags keeps a replay's mark: a node of a reshaped tensor whose flags were set after it
// was refreshed is still reshaped, and the mark is gone by the next run.
TEST(PlanTapeTest, SetFlagsKeepsTheReshapedMark) {
  PlanTape tape;
  tape.Begin(/*replay=*/false);
  ASSERT_TRUE(MakePlan(tape, 3).ok());
  tape.Begin(/*replay=*/true);
  const int64_t ne[kMaxDims] = {8, 7, 1, 1};
  Tensor* blank = *tape.NewBlank(DType::kF32, ne);
  PlanTape::SetFlags(blank, kFlagOutput);
  Tensor* const in[1] = {blank};
  Tensor* cont = *tape.NewNode(Op::kCont, in, {});
  EXPECT_EQ(ShapeOf(cont), (std::vector<int64_t>{8, 7, 1, 1}));
  tape.Begin(/*replay=*/true);
  EXPECT_EQ(blank->flags, static_cast<uint32_t>(kFlagOutput));
}

}  // namespace
}  // namespace tg::meta
