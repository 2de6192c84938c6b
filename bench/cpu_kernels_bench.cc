// Benchmarks of the CPU MUL_MAT kernels (docs/benchmarks.md, "CPU kernels"):
//  * stream_read/<bytes>: STREAM-style read bandwidth (sum of floats) on kThreads threads;
//  * matvec/<type>/8192x8192: decode-style matrix-vector products through ComputeMulMat on a
//    persistent thread team, each iteration interleaved with a STREAM pass over a buffer of
//    the weight's size, so the "pct_of_stream" counter compares both under the same
//    conditions (cache state, machine load) in the same run;
//  * gemm_f32/M.._N.._K..: prefill-style F32 GEMM through ComputeMulMat, timed in rounds
//    against OpenBLAS's cblas_sgemm, both on kThreads threads;
//  * dot_kernel_l2_1thread/<type>: the tile kernel alone, one thread, L2-resident weight:
//    the compute ceiling a matvec approaches when memory is faster than the kernel;
//  * decode_columns/<type>/8192x8192/<n>: a decode of n sequences at once (n activation rows,
//    the tile kernels), weights from cold caches: "x_one_column" is its time against one
//    single-column product in the same iteration, "columns_per_one" n over that (how many
//    columns batching gets for the time of one);
//  * mul_mat_quant/<type>/...: quantized weights with many activation rows (for reference).
// A summary with the ratios against the targets is printed at the end.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/compute_params.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd_math.h"
#include "backends/cpu/kernels/vec_dot.h"
#include "benchmark/benchmark.h"
#include "core/quants.h"
#include "core/spin_barrier.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

#if defined(TG_HAVE_BLAS)
#include <cblas.h>
#if defined(TG_HAVE_OPENBLAS)
extern "C" void openblas_set_num_threads(int num_threads);
#endif
#endif

namespace tg::cpu {
namespace {

constexpr int kThreads = 2;
constexpr int64_t kMatVecDim = 8192;
constexpr int kDistinctRows = 16;  // random rows, repeated to fill the big weights quickly.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr double kMatVecTarget = 0.70;  // of STREAM read bandwidth.
constexpr int kMatVecIterations = 31;
constexpr double kGemmTarget = 0.60;  // of OpenBLAS sgemm.
constexpr int kGemmRounds = 9;
constexpr int kGemmRunsPerRound = 3;
// OpenBLAS workers spin for up to 2^28 cycles (~0.1 s) after a call before they sleep.
constexpr std::chrono::milliseconds kBlasIdle{150};
constexpr double kGiga = 1e9;

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Page-aligned memory with transparent huge pages requested; weights and the STREAM buffer
// both come from here so that they see the same TLB behaviour.
class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes) : size_((bytes + kHugePage - 1) / kHugePage * kHugePage) {
    data_ = std::aligned_alloc(kHugePage, size_);
    madvise(data_, size_, MADV_HUGEPAGE);
    std::memset(data_, 0, size_);
  }
  ~HostBuffer() { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  size_t size_;
  void* data_;
};

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The thread team of the whole run: a persistent pool (workers spin between jobs, as in a
// decode loop) and the barrier kernels sync on.
class Team {
 public:
  Team() : pool_(kThreads), barrier_(kThreads) {}
  void Run(const std::function<void(int)>& fn) { pool_.Run(fn); }
  void Compute(void (*kernel)(const ComputeParams&, Tensor*), Tensor* dst,
               std::vector<uint8_t>* work) {
    pool_.Run([&](int ith) {
      ComputeParams p;
      p.ith = ith;
      p.nth = kThreads;
      p.wdata = work->data();
      p.wsize = work->size();
      p.barrier = &barrier_;
      p.error = &error_;
      kernel(p, dst);
    });
  }

 private:
  ThreadPool pool_;
  Barrier barrier_;
  KernelError error_;
};

Team& GetTeam() {
  static Team* team = new Team();
  return *team;
}

// Four independent sums, so that the adds keep up with the loads being measured.
float SumFloats(const float* p, size_t n) {
#if defined(TG_SIMD)
  using simd::Add;
  using simd::kLanes;
  simd::VecF a[4] = {simd::Set1(0.0f), simd::Set1(0.0f), simd::Set1(0.0f), simd::Set1(0.0f)};
  for (size_t i = 0; i + 4 * kLanes <= n; i += 4 * kLanes) {
    for (int u = 0; u < 4; ++u) a[u] = Add(a[u], simd::Load(p + i + u * kLanes));
  }
  return simd::ReduceAdd(Add(Add(a[0], a[1]), Add(a[2], a[3])));
#else
  float s[4] = {};
  for (size_t i = 0; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) s[j] += p[i + j];
  }
  return s[0] + s[1] + s[2] + s[3];
#endif
}

// One read pass over `bytes` of `buf`, split over the team; returns seconds.
double StreamPass(const HostBuffer& buf, size_t bytes) {
  constexpr size_t kChunk = 64;  // floats per SumFloats step.
  const size_t per_thread = bytes / sizeof(float) / kThreads / kChunk * kChunk;
  float sums[kThreads];
  const Clock::time_point t0 = Clock::now();
  GetTeam().Run(
      [&](int ith) { sums[ith] = SumFloats(buf.as<float>() + ith * per_thread, per_thread); });
  const double t = Seconds(t0);
  benchmark::DoNotOptimize(sums);
  return t;
}

// A MUL_MAT node over host memory: a [k, m] of `type`, b [k, n] f32, dst [m, n].
struct MulMatCase {
  MulMatCase(DType type, int64_t k, int64_t m, int64_t n)
      : weight(RowBytes(type, k) * m), act(k * n * sizeof(float)), out(m * n * sizeof(float)) {
    a.type = type;
    a.ne[0] = k, a.ne[1] = m;
    SetContiguousStrides(&a);
    a.data = weight.as<void>();
    b.ne[0] = k, b.ne[1] = n;
    SetContiguousStrides(&b);
    b.data = act.as<void>();
    dst.ne[0] = m, dst.ne[1] = n;
    SetContiguousStrides(&dst);
    dst.data = out.as<void>();
    dst.op = Op::kMulMat;
    dst.src[0] = &a;
    dst.src[1] = &b;
    FillWeights(type, k, m);
    const std::vector<float> x = RandomFloats(k * n, 2);
    std::memcpy(b.data, x.data(), x.size() * sizeof(float));
    work.resize(MulMatWorkSize(&dst, kThreads));
  }

  void FillWeights(DType type, int64_t k, int64_t m) {
    const size_t row = RowBytes(type, k);
    const std::vector<float> x = RandomFloats(k * kDistinctRows, 1);
    for (int r = 0; r < kDistinctRows && r < m; ++r) {
      QuantizeRow(type, x.data() + r * k, weight.as<char>() + r * row, k);
    }
    for (int64_t r = kDistinctRows; r < m; ++r) {
      std::memcpy(weight.as<char>() + r * row, weight.as<char>() + (r % kDistinctRows) * row, row);
    }
  }

  size_t WeightBytes() const { return a.nb[1] * a.ne[1]; }
  void Run() { GetTeam().Compute(ComputeMulMat, &dst, &work); }

  HostBuffer weight, act, out;
  Tensor a, b, dst;
  std::vector<uint8_t> work;
};

// Results kept for the summary and the cross-benchmark ratios.
struct MatVecResult {
  double weight_gbs, stream_gbs, ratio;  // of the median-ratio iteration.
};
std::map<std::string, MatVecResult>& ColdResults() {
  static auto* r = new std::map<std::string, MatVecResult>();
  return *r;
}
std::map<std::string, MatVecResult>& WarmResults() {
  static auto* r = new std::map<std::string, MatVecResult>();
  return *r;
}
struct GemmResult {
  double ours, openblas;  // GFLOP/s of the median round.
};
std::map<std::string, GemmResult>& GemmResults() {
  static auto* r = new std::map<std::string, GemmResult>();
  return *r;
}

void BM_StreamRead(benchmark::State& state, size_t bytes) {
  HostBuffer buf(bytes);
  StreamPass(buf, bytes);
  for (auto _ : state) state.SetIterationTime(StreamPass(buf, bytes));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// One iteration of a paired benchmark: the reference (STREAM pass, OpenBLAS) and ours doing
// the same work, in seconds.
struct PairedTimes {
  double reference, ours;
  double Ratio() const { return reference / ours; }  // our speed relative to the reference.
};

// The iteration with the median ratio, so that the reported bandwidths and ratio come from
// the same moment (other tenants make bandwidth swing by 3x within seconds).
PairedTimes MedianPair(std::vector<PairedTimes> v) {
  std::sort(v.begin(), v.end(),
            [](const PairedTimes& a, const PairedTimes& b) { return a.Ratio() < b.Ratio(); });
  return v.empty() ? PairedTimes{1, 1} : v[v.size() / 2];
}

// Reads a buffer four times the L3 size (untimed), so that the next timed pass starts with
// nothing of its data in any cache. Without it a 36 MiB weight is partly served from the
// 32 MiB L3 (AMD's victim L3 is not LRU and keeps part of a cyclic stream), and the
// "STREAM" figure becomes a mix of L3 and DRAM bandwidth.
void EvictCaches() {
  constexpr size_t kEvictBytes = size_t{128} << 20;
  static HostBuffer* buffer = new HostBuffer(kEvictBytes);
  StreamPass(*buffer, kEvictBytes);
}

// Each iteration times a STREAM pass over a buffer of the weight's size and a matvec back to
// back, both from cold caches (cold) or each right after the other (warm: the weight and the
// STREAM buffer compete for L3). Pairing the passes and taking the median pair makes the
// ratio robust to the load other tenants of the host put on the memory.
void BM_MatVec(benchmark::State& state, DType type, bool cold) {
  MulMatCase c(type, kMatVecDim, kMatVecDim, 1);
  const size_t bytes = c.WeightBytes();
  HostBuffer stream(bytes);
  c.Run();
  StreamPass(stream, bytes);
  std::vector<PairedTimes> times;
  for (auto _ : state) {
    if (cold) EvictCaches();
    const double ts = StreamPass(stream, bytes);
    if (cold) EvictCaches();
    const Clock::time_point t0 = Clock::now();
    c.Run();
    const double t = Seconds(t0);
    state.SetIterationTime(t);
    times.push_back({ts, t});
  }
  const PairedTimes median = MedianPair(times);
  const MatVecResult r{bytes / median.ours / kGiga, bytes / median.reference / kGiga,
                       median.Ratio()};
  (cold ? ColdResults() : WarmResults())[DTypeName(type)] = r;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["weight_GB/s"] = r.weight_gbs;
  state.counters["stream_GB/s"] = r.stream_gbs;
  state.counters["pct_of_stream"] = 100.0 * r.ratio;
}

std::string ShapeName(int64_t m, int64_t n, int64_t k) {
  return absl::StrCat("M", m, "_N", n, "_K", k);
}

// Times `run` per iteration; reports GFLOP/s and returns it.
double TimeFlops(benchmark::State& state, double flops, const std::function<void()>& run) {
  run();
  double total = 0;
  for (auto _ : state) {
    const Clock::time_point t0 = Clock::now();
    run();
    const double t = Seconds(t0);
    total += t;
    state.SetIterationTime(t);
  }
  const double gflops = flops * static_cast<double>(state.iterations()) / total / kGiga;
  state.counters["GFLOP/s"] = gflops;
  return gflops;
}

// Seconds for the median of kGemmRunsPerRound calls of `run`.
double MedianRun(const std::function<void()>& run) {
  std::vector<double> t(kGemmRunsPerRound);
  for (double& x : t) {
    const Clock::time_point t0 = Clock::now();
    run();
    x = Seconds(t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Our GEMM and OpenBLAS's in rounds (a few calls of each, then a pause in which OpenBLAS's
// idle workers stop spinning, which would otherwise take a core from the next round). The
// figures come from the round with the median ratio, so a burst of load from other tenants
// during one benchmark cannot decide the comparison.
void BM_Gemm(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  MulMatCase c(DType::kF32, k, m, n);
  const double gflop = 2.0 * m * n * k / kGiga;
  auto ours = [&] { c.Run(); };
  std::vector<PairedTimes> rounds;
  ours();
  for (auto _ : state) {
    const double t_ours = MedianRun(ours);
    double t_blas = t_ours;
#if defined(TG_HAVE_BLAS)
    t_blas = MedianRun([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(m),
                  static_cast<int>(k), 1.0f, static_cast<const float*>(c.b.data),
                  static_cast<int>(k), static_cast<const float*>(c.a.data), static_cast<int>(k),
                  0.0f, static_cast<float*>(c.dst.data), static_cast<int>(m));
    });
    std::this_thread::sleep_for(kBlasIdle);
#endif
    state.SetIterationTime(t_ours);
    rounds.push_back({t_blas, t_ours});
  }
  const PairedTimes median = MedianPair(rounds);
  const GemmResult r{gflop / median.ours, gflop / median.reference};
  GemmResults()[ShapeName(m, n, k)] = r;
  state.counters["GFLOP/s"] = r.ours;
#if defined(TG_HAVE_BLAS)
  state.counters["openblas_GFLOP/s"] = r.openblas;
  state.counters["pct_of_openblas"] = 100.0 * r.ours / r.openblas;
#endif
}

// The dot kernels' compute ceiling: one thread, a weight that stays in L2, activations
// converted once (as in a matvec with a large weight, where conversion is noise).
void BM_DotKernelCached(benchmark::State& state, DType type) {
  constexpr int64_t kK = 4096;
  constexpr size_t kWeightBytes = 512 * 1024;  // half of a Zen 4 L2.
  const size_t row = RowBytes(type, kK);
  const int64_t rows = static_cast<int64_t>(kWeightBytes / row);
  MulMatCase c(type, kK, rows, 1);
  const DotKernels& kern = GetDotKernels(type);
  std::vector<uint8_t> act(kern.act_row_bytes(kK) + kHugePage);
  void* aligned = reinterpret_cast<void*>(
      (reinterpret_cast<uintptr_t>(act.data()) + kHugePage - 1) / kHugePage * kHugePage);
  const void* b = c.b.data;
  if (kern.from_f32 != nullptr) {
    kern.from_f32(static_cast<const float*>(c.b.data), aligned, kK);
    b = aligned;
  }
  float* out = static_cast<float*>(c.dst.data);
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; r += kern.streaming_rows) {
      float* c_row = out + r;
      const int n = static_cast<int>(std::min<int64_t>(kern.streaming_rows, rows - r));
      kern.tile(kK, c.weight.as<char>() + r * row, row, n, static_cast<int>(rows - r - n), &b, 1,
                &c_row);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * rows * row));
}

// n activation columns against a cold 8192x8192 weight, timed against one column in the same
// iteration (both from cold caches).
void BM_DecodeColumns(benchmark::State& state, DType type, int64_t n) {
  MulMatCase batch(type, kMatVecDim, kMatVecDim, n);
  MulMatCase one(type, kMatVecDim, kMatVecDim, 1);
  batch.Run();
  one.Run();
  std::vector<PairedTimes> times;
  for (auto _ : state) {
    EvictCaches();
    Clock::time_point t0 = Clock::now();
    one.Run();
    const double t_one = Seconds(t0);
    EvictCaches();
    t0 = Clock::now();
    batch.Run();
    const double t = Seconds(t0);
    state.SetIterationTime(t);
    times.push_back({t_one, t});
  }
  const PairedTimes median = MedianPair(times);
  state.counters["weight_GB/s"] = batch.WeightBytes() / median.ours / kGiga;
  state.counters["x_one_column"] = median.ours / median.reference;
  state.counters["columns_per_one"] = static_cast<double>(n) * median.reference / median.ours;
}

void BM_MulMatQuant(benchmark::State& state, DType type, int64_t m, int64_t n, int64_t k) {
  MulMatCase c(type, k, m, n);
  TimeFlops(state, 2.0 * m * n * k, [&] { c.Run(); });
}

void PrintMatVec(const char* title, const std::map<std::string, MatVecResult>& results,
                 bool judge) {
  std::printf("%-26s %10s %10s %8s %8s\n", title, "GB/s", "STREAM", "ratio", "target");
  for (const auto& [type, r] : results) {
    const bool targeted = type == "q4_0" || type == "q8_0" || type == "q4_K" || type == "f16";
    const char* verdict = !judge || !targeted        ? "-"
                          : r.ratio >= kMatVecTarget ? ">=70% ok"
                                                     : ">=70% MISS";
    std::printf("%-26s %10.1f %10.1f %7.0f%% %8s\n", type.c_str(), r.weight_gbs, r.stream_gbs,
                100 * r.ratio, verdict);
  }
}

void PrintSummary() {
  std::printf("\nSummary (%d threads, kernels: %s)\n", kThreads, DotKernelsIsa());
  PrintMatVec("matvec 8192x8192, cold", ColdResults(), true);
  PrintMatVec("matvec 8192x8192, warm L3", WarmResults(), false);
  std::printf("%-26s %10s %10s %8s %8s\n", "gemm f32", "GFLOP/s", "OpenBLAS", "ratio", "target");
  for (const auto& [shape, r] : GemmResults()) {
#if defined(TG_HAVE_BLAS)
    const double ratio = r.ours / r.openblas;
    std::printf("%-26s %10.1f %10.1f %7.0f%% %8s\n", shape.c_str(), r.ours, r.openblas, 100 * ratio,
                ratio >= kGemmTarget ? ">=60% ok" : ">=60% MISS");
#else
    std::printf("%-26s %10.1f %10s\n", shape.c_str(), r.ours, "-");
#endif
  }
}

void RegisterAll() {
  constexpr DType kMatVecTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                    DType::kQ6_K, DType::kQ4_0, DType::kQ4_K};
  for (DType type : kMatVecTypes) {
    const size_t bytes = RowBytes(type, kMatVecDim) * kMatVecDim;
    const std::string name =
        absl::StrCat("stream_read/", bytes >> 20, "MiB_", DTypeName(type), "_weight");
    benchmark::RegisterBenchmark(name.c_str(), BM_StreamRead, bytes)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (bool cold : {true, false}) {
    for (DType type : kMatVecTypes) {
      const std::string name =
          absl::StrCat("matvec/", DTypeName(type), "/8192x8192/", cold ? "cold" : "warm");
      // Fixed iterations: manual time counts only the matvec, so a minimum time would make
      // the cheap types run hundreds of (evicting) iterations.
      benchmark::RegisterBenchmark(name.c_str(), BM_MatVec, type, cold)
          ->UseManualTime()
          ->Iterations(kMatVecIterations)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (DType type : kMatVecTypes) {
    const std::string name = absl::StrCat("dot_kernel_l2_1thread/", DTypeName(type), "/4096");
    benchmark::RegisterBenchmark(name.c_str(), BM_DotKernelCached, type)
        ->Unit(benchmark::kMicrosecond);
  }
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t n : {2, 4, 8}) {
      const std::string name = absl::StrCat("decode_columns/", DTypeName(type), "/8192x8192/", n);
      benchmark::RegisterBenchmark(name.c_str(), BM_DecodeColumns, type, n)
          ->UseManualTime()
          ->Iterations(kMatVecIterations)
          ->Unit(benchmark::kMillisecond);
    }
  }
  constexpr int64_t kShapes[][3] = {{2048, 2048, 512}, {2048, 512, 2048}};  // M, N, K.
  for (const auto& s : kShapes) {
    const std::string name = absl::StrCat("gemm_f32/", ShapeName(s[0], s[1], s[2]));
    benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, s[0], s[1], s[2])
        ->UseManualTime()
        ->Iterations(kGemmRounds)
        ->Unit(benchmark::kMillisecond);
  }
  for (DType type : {DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    const std::string name =
        absl::StrCat("mul_mat_quant/", DTypeName(type), "/", ShapeName(2048, 512, 2048));
    benchmark::RegisterBenchmark(name.c_str(), BM_MulMatQuant, type, 2048, 512, 2048)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace tg::cpu

int main(int argc, char** argv) {
#if defined(TG_HAVE_OPENBLAS)
  openblas_set_num_threads(tg::cpu::kThreads);
#endif
  tg::cpu::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  tg::cpu::PrintSummary();
  return 0;
}
