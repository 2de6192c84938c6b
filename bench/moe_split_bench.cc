// One mixture-of-experts feed-forward layer (meta/moe_testing.h) of a scaled-down qwen3moe
// (n_embd 1024, 16 experts, 4 used, expert width 768) on a meta device over 2 one-thread CPU
// devices: experts cut by width (-sm tensor) against whole experts per device (-sm tensor
// --expert-split), for a decode step and prompt batches, in Q8_0 and Q4_K; and the same
// layer on one device for scale. Random router choices (distinct experts per token).
//
//   moe_split_bench --benchmark_filter=Moe --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "meta/moe_testing.h"

namespace tg::meta {
namespace {

constexpr uint32_t kSeed = 42;

// state.range(0): tokens; range(1): 0 Q8_0, 1 Q4_K.
void RunMoe(benchmark::State& state, MoeCut cut, std::vector<float> share) {
  MoeShape s;
  s.embd = 1024;
  s.width = 768;
  s.experts = 16;
  s.used = 4;
  s.tokens = state.range(0);
  s.type = state.range(1) == 0 ? DType::kQ8_0 : DType::kQ4_K;
  const MoeData data = MakeMoeData(s, kSeed);
  absl::StatusOr<std::unique_ptr<MoeOnMeta>> moe =
      MoeOnMeta::Create(s, data, cut, std::move(share), /*threads=*/1);
  if (!moe.ok()) {
    state.SkipWithError(std::string(moe.status().message()).c_str());
    return;
  }
  // CPU time of every thread of the process (the rank threads and the devices' pools): the
  // work a split costs, which a loaded machine inflates less than the wall time.
  const std::clock_t cpu0 = std::clock();
  for (auto _ : state) {
    if (absl::Status st = (*moe)->Run(nullptr); !st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
  }
  const double cpu_ms = 1e3 * static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  state.counters["all_threads_cpu_ms"] =
      cpu_ms / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * s.tokens);  // tokens/s
  state.SetLabel(DTypeName(s.type));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t type : {0, 1}) {
    for (int64_t tokens : {1, 16, 128}) b->Args({tokens, type});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void BM_MoeOneDevice(benchmark::State& state) { RunMoe(state, MoeCut::kWidth, {1.0f}); }
void BM_MoeWidthSplit2(benchmark::State& state) { RunMoe(state, MoeCut::kWidth, {0.5f, 0.5f}); }
void BM_MoeExpertSplit2(benchmark::State& state) { RunMoe(state, MoeCut::kExperts, {0.5f, 0.5f}); }

BENCHMARK(BM_MoeOneDevice)->Apply(Args);
BENCHMARK(BM_MoeWidthSplit2)->Apply(Args);
BENCHMARK(BM_MoeExpertSplit2)->Apply(Args);

}  // namespace
}  // namespace tg::meta

BENCHMARK_MAIN();
