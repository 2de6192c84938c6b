// Many threads, each with its own stream (and thread pool), computing many graphs at once:
// every result must equal the one computed alone. Run under the asan preset too.
#include <gtest/gtest.h>

#include <array>
#include <thread>

#include "core/context.h"
#include "core/ops.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

// A small attention-like block: out = softmax(w x^T * s) with a norm and a residual.
struct Block {
  Context ctx;
  Tensor* w;
  Tensor* x;
  Tensor* out;
  Graph graph;
};

std::unique_ptr<Block> MakeBlock(int64_t k, int64_t m, int64_t n) {
  auto b = std::make_unique<Block>();
  b->w = *b->ctx.NewTensor(DType::kF32, {k, m});
  b->x = *b->ctx.NewTensor(DType::kF32, {k, n});
  b->x->flags |= kFlagInput;
  Tensor* h = *MulMat(b->ctx, b->w, *RmsNorm(b->ctx, b->x, 1e-5f));
  Tensor* p = *SoftMax(b->ctx, h, nullptr, 0.25f);
  b->out = *Add(b->ctx, *Silu(b->ctx, p), p);
  b->graph = *BuildGraph({b->out});
  return b;
}

std::vector<float> RunBlock(Device* cpu, Stream* stream, int64_t k, int64_t m, int64_t n,
                            uint32_t seed) {
  auto b = MakeBlock(k, m, n);
  testing::GraphRun run;
  absl::Status s = testing::AllocateAndCompute(
      cpu, stream, b->graph,
      {{b->w, testing::RandomFloats(k * m, seed)}, {b->x, testing::RandomFloats(k * n, seed + 1)}},
      &run);
  if (!s.ok()) return {};
  return testing::ReadF32(*b->out);
}

TEST(ThreadingStressTest, ConcurrentStreamsAgreeWithSerialRuns) {
  Device* cpu = testing::CpuDevice();
  ASSERT_NE(cpu, nullptr);
  constexpr int kThreads = 6;
  constexpr int kGraphsPerThread = 12;
  auto shape = [](int i) {
    return std::array<int64_t, 3>{32 + 32 * (i % 3), 5 + i % 7, 1 + i % 4};
  };
  auto serial_stream = cpu->CreateStream();
  ASSERT_TRUE(serial_stream.ok());
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < kThreads * kGraphsPerThread; ++i) {
    auto [k, m, n] = shape(i);
    expected.push_back(RunBlock(cpu, serial_stream->get(), k, m, n, 100 + i));
    ASSERT_FALSE(expected.back().empty());
  }
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stream = cpu->CreateStream();
      if (!stream.ok()) {
        ++mismatches[t];
        return;
      }
      for (int j = 0; j < kGraphsPerThread; ++j) {
        const int i = t * kGraphsPerThread + j;
        auto [k, m, n] = shape(i);
        if (RunBlock(cpu, stream->get(), k, m, n, 100 + i) != expected[i]) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(ThreadingStressTest, StreamsAreCreatedAndDestroyedRepeatedly) {
  Device* cpu = testing::CpuDevice();
  ASSERT_NE(cpu, nullptr);
  for (int i = 0; i < 50; ++i) {
    auto stream = cpu->CreateStream();
    ASSERT_TRUE(stream.ok());
    EXPECT_FALSE(RunBlock(cpu, stream->get(), 32, 3, 2, i).empty());
  }
}

}  // namespace
}  // namespace tg
