// The all-reduce planning: which algorithm for which size, device count and topology, the
// two-shot chunks, the environment thresholds; and one-shot and two-shot emulated on plain
// arrays with the kernels' element math (allreduce_math.h): every rank must end with the
// same bits, equal to the rank-order sum (of the BF16-rounded inputs with BF16 on the wire).
#include "backends/cuda/allreduce_plan.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/allreduce_math.h"
#include "core/fp16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/lib/test_util.h"

namespace tg::cuda {
namespace {

using ::testing::HasSubstr;

constexpr size_t kKiB = 1024;

TEST(AllReducePlanTest, DecodeTensorsGoOneShotPromptTensorsTwoShotOrNccl) {
  const AllReduceThresholds t;
  const AllReduceTopology two_gpus{2, /*nccl=*/true, /*peer_access=*/true};
  // An 8B model's decode step: 4096 floats.
  EXPECT_EQ(ChooseAllReduce(16 * kKiB, two_gpus, t).algorithm, AllReduceAlgorithm::kOneShot);
  EXPECT_EQ(ChooseAllReduce(t.one_shot_max_bytes, two_gpus, t).algorithm,
            AllReduceAlgorithm::kOneShot);
  EXPECT_EQ(ChooseAllReduce(t.one_shot_max_bytes + 4, two_gpus, t).algorithm,
            AllReduceAlgorithm::kTwoShot);
  EXPECT_EQ(ChooseAllReduce(t.p2p_max_bytes, two_gpus, t).algorithm, AllReduceAlgorithm::kTwoShot);
  // Its 512-token prompt: 8 MiB + more goes to NCCL.
  EXPECT_EQ(ChooseAllReduce(t.p2p_max_bytes + 4, two_gpus, t).algorithm, AllReduceAlgorithm::kNccl);
}

TEST(AllReducePlanTest, OneShotLimitShrinksWithMoreRanks) {
  const AllReduceThresholds t;
  const size_t bytes = t.one_shot_max_bytes / 2;
  for (int n : {2, 3, 4, 8}) {
    const AllReduceTopology topo{n, true, true};
    const bool one_shot = bytes <= t.one_shot_max_bytes / static_cast<size_t>(n - 1);
    EXPECT_EQ(ChooseAllReduce(bytes, topo, t).algorithm,
              one_shot ? AllReduceAlgorithm::kOneShot : AllReduceAlgorithm::kTwoShot)
        << n;
  }
}

TEST(AllReducePlanTest, WithoutNcclEverythingStaysPeerToPeer) {
  // Virtual devices on one GPU (NCCL refuses two ranks there), or no libnccl.
  const AllReduceTopology virtual_devices{2, /*nccl=*/false, /*peer_access=*/true};
  const AllReduceThresholds t;
  for (size_t bytes : {size_t{4}, 64 * kKiB, size_t{1} << 30}) {
    EXPECT_NE(ChooseAllReduce(bytes, virtual_devices, t).algorithm, AllReduceAlgorithm::kNccl);
  }
  EXPECT_EQ(ChooseAllReduce(size_t{1} << 30, virtual_devices, t).algorithm,
            AllReduceAlgorithm::kTwoShot);
}

TEST(AllReducePlanTest, WithoutPeerAccessEverythingGoesToNcclOrNowhere) {
  const AllReduceThresholds t;
  const AllReduceTopology pcie{2, /*nccl=*/true, /*peer_access=*/false};
  EXPECT_EQ(ChooseAllReduce(64, pcie, t).algorithm, AllReduceAlgorithm::kNccl);
  EXPECT_TRUE(CheckAllReduceTopology(pcie).ok());
  const absl::Status none = CheckAllReduceTopology({2, false, false});
  EXPECT_TRUE(absl::IsFailedPrecondition(none));
  EXPECT_THAT(none.message(), HasSubstr("libnccl.so.2"));
  EXPECT_TRUE(CheckAllReduceTopology({1, false, false}).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(CheckAllReduceTopology({0, true, true})));
}

TEST(AllReducePlanTest, Bf16OnTheWireFromTheThresholdOn) {
  AllReduceThresholds t;
  const AllReduceTopology topo{2, true, true};
  EXPECT_EQ(ChooseAllReduce(size_t{1} << 30, topo, t).wire, WireType::kF32);  // off by default.
  t.bf16_min_bytes = 64 * kKiB;
  EXPECT_EQ(ChooseAllReduce(64 * kKiB - 4, topo, t).wire, WireType::kF32);
  EXPECT_EQ(ChooseAllReduce(64 * kKiB, topo, t).wire, WireType::kBF16);
  EXPECT_EQ(ChooseAllReduce(t.p2p_max_bytes * 2, topo, t).wire, WireType::kBF16);
}

TEST(AllReducePlanTest, TwoShotChunksCoverInOrderOnVectorBounds) {
  for (size_t count : {size_t{1}, size_t{7}, size_t{8}, size_t{100}, size_t{4096}, size_t{4099}}) {
    for (int n = 1; n <= 8; ++n) {
      size_t expect = 0;
      for (int r = 0; r < n; ++r) {
        size_t b = 0, e = 0;
        TwoShotChunk(count, n, r, &b, &e);
        EXPECT_EQ(b, expect) << count << " " << n << " " << r;
        EXPECT_LE(b, e);
        EXPECT_EQ(b % kChunkElements == 0 || b == count, true);
        expect = e;
      }
      EXPECT_EQ(expect, count) << count << " " << n;
    }
  }
}

TEST(AllReducePlanTest, ThresholdsFromTheEnvironment) {
  std::map<std::string, std::string> env = {{"TG_CUDA_AR_ONE_SHOT_MAX", "1024"},
                                            {"TG_CUDA_AR_P2P_MAX", "nope"},
                                            {"TG_CUDA_AR_BF16_MIN", "65536"}};
  std::vector<std::string> notes;
  const AllReduceThresholds t = AllReduceThresholdsFromEnv(
      [&](const char* n) { return env.count(n) ? env[n].c_str() : nullptr; }, &notes);
  EXPECT_EQ(t.one_shot_max_bytes, 1024u);
  EXPECT_EQ(t.p2p_max_bytes, kDefaultP2pMaxBytes);
  EXPECT_EQ(t.bf16_min_bytes, 65536u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("TG_CUDA_AR_P2P_MAX='nope'"));
}

// One-shot and two-shot on plain arrays, with the kernels' element functions.
std::vector<std::vector<float>> Emulate(AllReduceAlgorithm a, bool bf16,
                                        std::vector<std::vector<float>> data) {
  const int n = static_cast<int>(data.size());
  const size_t count = data[0].size();
  std::vector<std::vector<uint8_t>> stage(n, std::vector<uint8_t>(count * 4));
  std::vector<const void*> srcs(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) StoreWire(stage[r].data(), i, data[r][i], bf16);
    srcs[r] = stage[r].data();
  }
  if (a == AllReduceAlgorithm::kOneShot) {
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) data[r][i] = SumRanks(srcs.data(), n, i, bf16);
    }
    return data;
  }
  std::vector<std::vector<uint8_t>> reduced(n, std::vector<uint8_t>(count * 4));
  for (int r = 0; r < n; ++r) {
    size_t b, e;
    TwoShotChunk(count, n, r, &b, &e);
    for (size_t i = b; i < e; ++i)
      StoreWire(reduced[r].data(), i, SumRanks(srcs.data(), n, i, bf16), bf16);
  }
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s) {
      size_t b, e;
      TwoShotChunk(count, n, s, &b, &e);
      for (size_t i = b; i < e; ++i) data[r][i] = LoadWire(reduced[s].data(), i, bf16);
    }
  }
  return data;
}

TEST(AllReducePlanTest, EmulatedAlgorithmsGiveEveryRankTheSameSum) {
  for (int n : {2, 3, 5}) {
    std::vector<std::vector<float>> data;
    for (int r = 0; r < n; ++r) data.push_back(tg::testing::RandomFloats(1003, 7 + r, -4.0f, 4.0f));
    for (AllReduceAlgorithm a : {AllReduceAlgorithm::kOneShot, AllReduceAlgorithm::kTwoShot}) {
      for (bool bf16 : {false, true}) {
        const auto out = Emulate(a, bf16, data);
        for (size_t i = 0; i < data[0].size(); ++i) {
          double want = 0;
          float rounded = 0;
          for (int r = 0; r < n; ++r) {
            want += data[r][i];
            rounded += bf16 ? BF16ToFloat(FloatToBF16(data[r][i])) : data[r][i];
          }
          for (int r = 0; r < n; ++r) {
            ASSERT_EQ(out[r][i], out[0][i]) << "rank " << r << " differs at " << i;
          }
          // F32: exactly the rank-order float sum; BF16: that sum of the rounded inputs, and
          // (two-shot) rounded again on the wire.
          if (!bf16) {
            ASSERT_EQ(out[0][i], rounded) << i;
          } else {
            ASSERT_NEAR(out[0][i], want, 0.02 * n + 0.01 * std::fabs(want)) << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tg::cuda
