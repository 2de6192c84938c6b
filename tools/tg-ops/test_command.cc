// `tg-ops test` (see commands.h). Each case is built once on the host to generate its
// leaf data and, for CPU-family devices, to compute the f64 reference; then it is rebuilt,
// placed and computed on every selected device with the same data. Non-CPU devices are
// compared with the CPU device's result.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/registry.h"
#include "core/status_macros.h"
#include "reference/reference_ops.h"
#include "tools/tg-ops/commands.h"
#include "tools/tg-ops/devices.h"
#include "tools/tg-ops/op_cases.h"
#include "tools/tg-ops/stream_cache.h"

namespace tg::ops_tool {
namespace {

constexpr uint64_t kSeedBase = 0x7467'6f70'7300'0000ull;  // "tgops": any fixed value.

enum class Verdict { kPass, kFail, kSkip };

struct Outcome {
  Verdict verdict;
  std::string detail;
};

struct Tally {
  int passed = 0;
  int failed = 0;
  int skipped = 0;
  double seconds = 0;
};

absl::StatusOr<HostTensor> ComputeOnDevice(const OpCase& c, Device& device, const LeafData& data,
                                           StreamCache& streams) {
  TG_ASSIGN_OR_RETURN(DeviceGraph dg, PrepareOnDevice(c.build, device, data));
  TG_ASSIGN_OR_RETURN(Stream * stream, streams.Get(device));
  TG_RETURN_IF_ERROR(stream->Compute(dg.built.graph));
  TG_RETURN_IF_ERROR(stream->Synchronize());
  return ReadBack(*dg.built.out);
}

Outcome Judge(const absl::StatusOr<HostTensor>& actual, const absl::StatusOr<HostTensor>& expected,
              double max_nmse, absl::string_view yardstick) {
  if (!actual.ok()) return {Verdict::kFail, absl::StrCat("error: ", actual.status().message())};
  if (!expected.ok()) {
    return {Verdict::kFail,
            absl::StrCat("no ", yardstick, " result: ", expected.status().message())};
  }
  const double nmse = ref::Nmse(actual->tensor(), expected->tensor());
  const bool ok = nmse <= max_nmse;  // false for NaN.
  return {ok ? Verdict::kPass : Verdict::kFail,
          absl::StrFormat("nmse=%.1e %s %.0e%s", nmse, ok ? "<=" : ">", max_nmse,
                          yardstick == "reference" ? "" : absl::StrCat(" vs ", yardstick))};
}

// Runs the catalogue case by case over all devices, caching per case the host reference
// and the CPU device's result (the yardsticks).
class TestRun {
 public:
  TestRun(const Options& opts, const std::vector<Device*>& devices)
      : opts_(opts), devices_(devices), cpu_(Registry::Get().CpuDevice()) {}

  void RunCase(const OpCase& c, uint64_t seed) {
    absl::StatusOr<BuiltCase> host = BuildCase(c.build);
    if (!host.ok()) {
      for (Device* d : devices_) {
        Record(*d, OpName(c.op),
               {Verdict::kFail, absl::StrCat("build: ", host.status().message())});
      }
      return;
    }
    const LeafData data = GenerateLeafData(host->leafs, seed);
    const std::string description = DescribeCase(c, *host);
    std::optional<absl::StatusOr<HostTensor>> reference;
    std::optional<absl::StatusOr<HostTensor>> cpu_result;
    for (Device* d : devices_) {
      const auto start = std::chrono::steady_clock::now();
      Outcome outcome;
      if (const Tensor* node = FirstUnsupportedNode(host->graph, *d); node != nullptr) {
        outcome = {Verdict::kSkip, absl::StrCat(OpName(node->op), " not supported, skipped")};
      } else if (IsCpuFamily(*d)) {
        if (!reference) reference = RunReference(*host, data);
        outcome =
            Judge(ComputeOnDevice(c, *d, data, streams_), *reference, c.max_nmse, "reference");
      } else {
        if (!cpu_result) cpu_result = CpuResult(c, data);
        outcome = Judge(ComputeOnDevice(c, *d, data, streams_), *cpu_result, c.max_nmse,
                        cpu_ != nullptr ? cpu_->name() : "CPU");
      }
      tallies_[d].seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      Record(*d, description, outcome);
    }
  }

  // Prints the per-device summaries and the total; returns the exit code.
  int Finish() const {
    int passed = 0;
    int failed = 0;
    std::printf("\n");
    for (Device* d : devices_) {
      auto it = tallies_.find(d);
      const Tally t = it == tallies_.end() ? Tally{} : it->second;
      std::printf("%s: %d passed, %d failed, %d skipped (%.0f ms)\n",
                  std::string(d->name()).c_str(), t.passed, t.failed, t.skipped, t.seconds * 1e3);
      passed += t.passed;
      failed += t.failed;
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
  }

 private:
  absl::StatusOr<HostTensor> CpuResult(const OpCase& c, const LeafData& data) {
    if (cpu_ == nullptr) return absl::NotFoundError("no CPU device to compare with");
    return ComputeOnDevice(c, *cpu_, data, streams_);
  }

  void Record(Device& d, absl::string_view description, const Outcome& outcome) {
    Tally& t = tallies_[&d];
    const char* mark = " ok";
    switch (outcome.verdict) {
      case Verdict::kPass:
        ++t.passed;
        break;
      case Verdict::kFail:
        ++t.failed;
        mark = " FAIL";
        break;
      case Verdict::kSkip:
        ++t.skipped;
        mark = "";
        break;
    }
    if (outcome.verdict == Verdict::kFail || opts_.verbose) {
      std::printf("  %s on %s: %s%s\n", std::string(description).c_str(),
                  std::string(d.name()).c_str(), outcome.detail.c_str(), mark);
      std::fflush(stdout);
    }
  }

  const Options& opts_;
  const std::vector<Device*>& devices_;
  Device* cpu_;
  StreamCache streams_;
  absl::flat_hash_map<Device*, Tally> tallies_;
};

}  // namespace

int RunTestCommand(const Options& opts, const std::vector<Device*>& devices) {
  const std::vector<OpCase> cases = TestCases();
  TestRun run(opts, devices);
  for (size_t i = 0; i < cases.size(); ++i) {
    // Seeded by catalogue position, so -o OP runs a case with the same data as a full run.
    if (opts.op.has_value() && cases[i].op != *opts.op) continue;
    run.RunCase(cases[i], kSeedBase + i);
  }
  return run.Finish();
}

}  // namespace tg::ops_tool
