// All-reduce throughput across 2 (and 4) virtual CPU devices (meta/allreduce.h), against a
// plain memcpy of the same size on one thread: what the tensor-parallel meta device pays per
// PARTIAL -> MIRRORED conversion. bytes/s counts the tensor size once per all-reduce.
//
//   allreduce_bench --benchmark_filter='AllReduce|Memcpy'
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "meta/allreduce.h"

namespace tg::meta {
namespace {

using Algorithm = AllReduceOptions::Algorithm;

// n one-thread CPU devices, each with one f32 tensor of `bytes`.
class Setup {
 public:
  Setup(int n, size_t bytes, AllReduceOptions options) {
    std::vector<Device*> devices;
    for (int i = 0; i < n; ++i) {
      cpus_.push_back(std::make_unique<cpu::CpuDevice>(absl::StrCat("B", i), "b", 1));
      devices.push_back(cpus_.back().get());
      Tensor* t = *ctx_.NewTensor(DType::kF32, {static_cast<int64_t>(bytes / sizeof(float))});
      buffers_.push_back(*cpus_.back()->default_buffer_type()->Allocate(bytes));
      (void)PlaceTensor(buffers_.back().get(), t, 0);
      std::vector<float> ones(t->NumElements(), 1.0f / n);
      (void)buffers_.back()->SetTensor(t, ones.data(), 0, bytes);
      tensors_.push_back(t);
    }
    reducer_ = *AllReducer::Create(devices, options);
  }
  absl::Status Run() { return reducer_->Run(tensors_); }
  const char* algorithm(size_t bytes) const { return reducer_->AlgorithmFor(bytes); }

 private:
  Context ctx_;
  std::vector<std::unique_ptr<cpu::CpuDevice>> cpus_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<Tensor*> tensors_;
  std::unique_ptr<AllReducer> reducer_;
};

void RunAllReduce(benchmark::State& state, int n, AllReduceOptions options) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Setup setup(n, bytes, options);
  for (auto _ : state) {
    if (absl::Status s = setup.Run(); !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.SetLabel(setup.algorithm(bytes));
}

AllReduceOptions With(Algorithm a, bool bf16 = false) {
  AllReduceOptions o;
  o.algorithm = a;
  if (bf16) o.bf16_min_bytes = 0;
  return o;
}

void BM_AllReduce2_Auto(benchmark::State& s) { RunAllReduce(s, 2, With(Algorithm::kAuto)); }
void BM_AllReduce2_Ring(benchmark::State& s) { RunAllReduce(s, 2, With(Algorithm::kRing)); }
void BM_AllReduce2_Butterfly(benchmark::State& s) {
  RunAllReduce(s, 2, With(Algorithm::kButterfly));
}
void BM_AllReduce2_RingBf16(benchmark::State& s) {
  RunAllReduce(s, 2, With(Algorithm::kRing, true));
}
void BM_AllReduce4_Auto(benchmark::State& s) { RunAllReduce(s, 4, With(Algorithm::kAuto)); }

// The yardstick: one thread copying the same bytes.
void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> a(bytes, 1);
  std::vector<uint8_t> b(bytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
}

// 1 KiB (a decode step's residual of a small model) to 16 MiB (a long prompt's).
#define TG_SIZES ->RangeMultiplier(4)->Range(1 << 10, 16 << 20)->UseRealTime()
BENCHMARK(BM_Memcpy) TG_SIZES;
BENCHMARK(BM_AllReduce2_Auto) TG_SIZES;
BENCHMARK(BM_AllReduce2_Ring) TG_SIZES;
BENCHMARK(BM_AllReduce2_Butterfly) TG_SIZES;
BENCHMARK(BM_AllReduce2_RingBf16) TG_SIZES;
BENCHMARK(BM_AllReduce4_Auto) TG_SIZES;

}  // namespace
}  // namespace tg::meta

BENCHMARK_MAIN();
