// `tg-ops perf` (see commands.h): per case and device, one warm-up run, one run to estimate the
// cost, then enough runs for about kTargetSeconds, averaged.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "tools/tg-ops/commands.h"
#include "tools/tg-ops/op_cases.h"
#include "tools/tg-ops/perf_cases.h"
#include "tools/tg-ops/stream_cache.h"

namespace tg::ops_tool {
namespace {

constexpr double kTargetSeconds = 0.2;
constexpr int kMaxRuns = 10000;
// Weights repeat their first rows beyond this: generating and quantizing hundreds of MB of
// random data would take longer than the timing itself. Values do not change the speed.
constexpr int64_t kDistinctRows = 64;
constexpr uint64_t kPerfSeed = 0x7065'7266;  // "perf".

struct Timing {
  double us_per_run = 0;
  double flops = 0;
  double bytes = 0;
};

const Tensor* NodeOf(Op op, const BuiltCase& built) {
  for (auto it = built.graph.nodes.rbegin(); it != built.graph.nodes.rend(); ++it) {
    if ((*it)->op == op) return *it;
  }
  return built.out;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::StatusOr<double> TimeRuns(Stream& stream, Graph& graph, int runs) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) TG_RETURN_IF_ERROR(stream.Compute(graph));
  TG_RETURN_IF_ERROR(stream.Synchronize());
  return SecondsSince(start);
}

absl::StatusOr<Timing> TimeCase(const PerfCase& c, Device& device, const LeafData& data,
                                StreamCache& streams) {
  TG_ASSIGN_OR_RETURN(DeviceGraph dg, PrepareOnDevice(c.build, device, data));
  TG_ASSIGN_OR_RETURN(Stream * stream, streams.Get(device));
  Graph& graph = dg.built.graph;
  TG_RETURN_IF_ERROR(TimeRuns(*stream, graph, 1).status());  // warm-up: caches, pages.
  TG_ASSIGN_OR_RETURN(double estimate, TimeRuns(*stream, graph, 1));
  Timing timing;
  timing.us_per_run = estimate * 1e6;
  if (estimate < kTargetSeconds) {
    const int runs = std::clamp(
        static_cast<int>(std::ceil(kTargetSeconds / std::max(estimate, 1e-9))), 1, kMaxRuns);
    TG_ASSIGN_OR_RETURN(double total, TimeRuns(*stream, graph, runs));
    timing.us_per_run = total / runs * 1e6;
  }
  const Tensor& node = *NodeOf(c.op, dg.built);
  timing.flops = NodeFlops(node);
  timing.bytes = NodeBytes(node);
  return timing;
}

std::string Rate(double amount, double us) {
  if (amount <= 0 || us <= 0) return "-";
  return absl::StrFormat("%.1f", amount / (us * 1e-6) / 1e9);
}

// `width`: of the device column, which fits the longest device name (meta devices are
// named like "META-K(CPU0,CPU1)").
void PrintRow(int width, absl::string_view op, absl::string_view label, absl::string_view device,
              absl::string_view us, absl::string_view gflops, absl::string_view gbs) {
  std::printf("%-11s %-42s %-*s %12s %9s %8s\n", std::string(op).c_str(),
              std::string(label).c_str(), width, std::string(device).c_str(),
              std::string(us).c_str(), std::string(gflops).c_str(), std::string(gbs).c_str());
  std::fflush(stdout);
}

}  // namespace

int RunPerfCommand(const Options& opts, const std::vector<Device*>& devices) {
  StreamCache streams;
  int errors = 0;
  int width = 8;
  for (Device* d : devices) width = std::max(width, static_cast<int>(d->name().size()));
  PrintRow(width, "op", "case", "device", "us/run", "GFLOP/s", "GB/s");
  for (const PerfCase& c : PerfCases()) {
    if (opts.op.has_value() && c.op != *opts.op) continue;
    absl::StatusOr<BuiltCase> host = BuildCase(c.build);
    if (!host.ok()) {
      std::printf("%s %s: %s\n", std::string(OpName(c.op)).c_str(), c.label.c_str(),
                  std::string(host.status().message()).c_str());
      ++errors;
      continue;
    }
    const LeafData data = GenerateLeafData(host->leafs, kPerfSeed, kDistinctRows);
    for (Device* d : devices) {
      if (FirstUnsupportedNode(host->graph, *d) != nullptr) {
        PrintRow(width, OpName(c.op), c.label, d->name(), "unsupported", "-", "-");
        continue;
      }
      absl::StatusOr<Timing> t = TimeCase(c, *d, data, streams);
      if (!t.ok()) {
        ++errors;
        std::printf("%-11s %-42s %-*s error: %s\n", std::string(OpName(c.op)).c_str(),
                    c.label.c_str(), width, std::string(d->name()).c_str(),
                    std::string(t.status().message()).c_str());
        continue;
      }
      PrintRow(width, OpName(c.op), c.label, d->name(), absl::StrFormat("%.1f", t->us_per_run),
               Rate(t->flops, t->us_per_run), Rate(t->bytes, t->us_per_run));
    }
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace tg::ops_tool
