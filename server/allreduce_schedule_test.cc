// The servers' all-reduce schedules, every rank run in this process with the pieces passed
// through a map as PeerReduce would: for every m from 1 to 9 and sizes smaller and larger
// than m, each rank ends with the f64 sum of the inputs (to float rounding) and every rank
// with the same bits; with BF16 on the wire (ring) within BF16 rounding, still bit-identical.
// Direct sums in rank order (the bits of a plain loop over the ranks) in one step.
#include "server/allreduce_schedule.h"

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "core/fp16.h"
#include "gtest/gtest.h"
#include "tests/lib/test_util.h"

namespace tg::server {
namespace {

enum class Kind { kRing, kButterfly, kDirect };

std::vector<ExchangeStep> Schedule(Kind kind, int m, int rank, size_t count) {
  switch (kind) {
    case Kind::kRing:
      return RingSchedule(m, rank, count);
    case Kind::kButterfly:
      return ButterflySchedule(m, rank, count);
    case Kind::kDirect:
      return DirectSchedule(m, rank, count);
  }
  return {};
}

// Runs all ranks' schedules step by step: first every rank's sends (into a mailbox keyed by
// receiver, sender and step), then every rank's receives. Steps with the same id may only
// pair ranks that both list them, which the mailbox check below enforces.
std::vector<std::vector<float>> Simulate(int m, const std::vector<std::vector<float>>& in,
                                         Kind kind, bool bf16) {
  const size_t count = in[0].size();
  std::vector<std::vector<float>> v = in;
  std::vector<std::vector<ExchangeStep>> steps(m);
  uint32_t last = 0;
  for (int r = 0; r < m; ++r) {
    steps[r] = Schedule(kind, m, r, count);
    for (const ExchangeStep& s : steps[r]) last = std::max(last, s.id);
  }
  std::map<std::tuple<int, int, uint32_t>, std::vector<float>> mail;
  for (uint32_t id = 0; id <= last; ++id) {
    for (int r = 0; r < m; ++r) {
      for (const ExchangeStep& s : steps[r]) {
        if (s.id != id || s.send_to < 0) continue;
        std::vector<float> piece(v[r].begin() + s.send_begin, v[r].begin() + s.send_end);
        if (bf16) {
          for (float& x : piece) x = BF16ToFloat(FloatToBF16(x));
        }
        EXPECT_TRUE(mail.emplace(std::make_tuple(s.send_to, r, id), piece).second);
      }
    }
    for (int r = 0; r < m; ++r) {
      for (const ExchangeStep& s : steps[r]) {
        if (s.id != id || s.recv_from < 0) continue;
        auto it = mail.find(std::make_tuple(r, s.recv_from, id));
        EXPECT_NE(it, mail.end()) << "rank " << r << " waits for " << s.recv_from << " step " << id
                                  << " that never sends";
        if (it == mail.end()) continue;
        EXPECT_EQ(it->second.size(), s.recv_end - s.recv_begin);
        if (it->second.size() != s.recv_end - s.recv_begin) continue;
        for (size_t i = s.recv_begin; i < s.recv_end; ++i) {
          const float x = it->second[i - s.recv_begin];
          v[r][i] = s.add ? v[r][i] + x : x;
          if (bf16 && s.final_sum) v[r][i] = BF16ToFloat(FloatToBF16(v[r][i]));
          if (s.add_own) v[r][i] += in[r][i];
        }
        mail.erase(it);
      }
    }
  }
  EXPECT_TRUE(mail.empty()) << mail.size() << " pieces sent and never taken";
  return v;
}

// Returns the outputs of every rank.
std::vector<std::vector<float>> CheckSums(int m, size_t count, Kind kind, bool bf16,
                                          std::vector<std::vector<float>>* inputs = nullptr) {
  SCOPED_TRACE(::testing::Message() << "m=" << m << " count=" << count
                                    << " kind=" << static_cast<int>(kind) << " bf16=" << bf16);
  std::vector<std::vector<float>> in(m);
  for (int r = 0; r < m; ++r) in[r] = tg::testing::RandomFloats(count, 100 + r);
  std::vector<std::vector<float>> out = Simulate(m, in, kind, bf16);
  if (inputs != nullptr) *inputs = in;
  for (size_t i = 0; i < count; ++i) {
    double want = 0;
    double scale = 0;
    for (int r = 0; r < m; ++r) {
      want += in[r][i];
      scale += std::fabs(in[r][i]);
    }
    // f32 adds: a few ulps of the magnitudes summed; BF16 on the wire: 8 bits of mantissa
    // per crossing, at most m of them.
    const double tol = bf16 ? scale * m * std::ldexp(1.0, -8) : scale * 1e-6 + 1e-7;
    EXPECT_NEAR(out[0][i], want, tol) << "element " << i;
    for (int r = 1; r < m; ++r) {
      uint32_t a, b;
      std::memcpy(&a, &out[0][i], 4);
      std::memcpy(&b, &out[r][i], 4);
      EXPECT_EQ(a, b) << "rank " << r << " element " << i << " differs from rank 0";
    }
    if (::testing::Test::HasFailure()) break;
  }
  return out;
}

TEST(AllReduceScheduleTest, RingSumsOnEveryRank) {
  for (int m = 1; m <= 9; ++m) {
    for (size_t count : {size_t{1}, size_t{5}, size_t{64}, size_t{1001}}) {
      CheckSums(m, count, Kind::kRing, /*bf16=*/false);
    }
  }
}

TEST(AllReduceScheduleTest, RingWithBf16OnTheWireEndsBitIdentical) {
  for (int m = 2; m <= 6; ++m) CheckSums(m, 777, Kind::kRing, /*bf16=*/true);
}

TEST(AllReduceScheduleTest, ButterflySumsOnEveryRankAlsoWhenMIsNoPowerOfTwo) {
  for (int m = 1; m <= 9; ++m) {
    for (size_t count : {size_t{1}, size_t{37}, size_t{300}}) {
      CheckSums(m, count, Kind::kButterfly, /*bf16=*/false);
    }
  }
}

TEST(AllReduceScheduleTest, DirectSumsInRankOrderInOneStep) {
  for (int m = 1; m <= 9; ++m) {
    for (size_t count : {size_t{1}, size_t{37}, size_t{300}}) {
      std::vector<std::vector<float>> in;
      const std::vector<std::vector<float>> out =
          CheckSums(m, count, Kind::kDirect, /*bf16=*/false, &in);
      // The bits of adding the ranks' vectors one after the other (float adds do not
      // associate, so another order would differ somewhere in 300 random elements).
      for (size_t i = 0; i < count; ++i) {
        float want = in[0][i];
        for (int r = 1; r < m; ++r) want += in[r][i];
        ASSERT_EQ(out[m - 1][i], want) << "m=" << m << " element " << i;
      }
    }
    // One step: every piece is sent at once, each rank's whole vector to each other rank.
    for (int r = 0; r < m; ++r) {
      const std::vector<ExchangeStep> steps = DirectSchedule(m, r, 10);
      ASSERT_EQ(steps.size(), static_cast<size_t>(2 * (m - 1)));
      for (const ExchangeStep& s : steps) {
        EXPECT_EQ(s.id, 0u);
        EXPECT_EQ(s.send_to >= 0 ? s.send_end - s.send_begin : s.recv_end - s.recv_begin, 10u);
      }
    }
  }
}

TEST(AllReduceScheduleTest, RingMovesOneMthPerStep) {
  // 2(m-1) steps, each sending one chunk: ~2x the vector per rank, whatever m.
  const size_t count = 1200;
  for (int m = 2; m <= 6; ++m) {
    const std::vector<ExchangeStep> steps = RingSchedule(m, 1, count);
    ASSERT_EQ(steps.size(), static_cast<size_t>(2 * (m - 1)));
    size_t sent = 0;
    for (const ExchangeStep& s : steps) sent += s.send_end - s.send_begin;
    EXPECT_EQ(sent, 2 * (m - 1) * count / m);
  }
}

}  // namespace
}  // namespace tg::server
