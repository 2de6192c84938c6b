// How the tools report a model's weight loading (LoadOptions::progress and ::loaded): a
// progress bar on a terminal, and the per-device load report that tg-run -v and tg-bench print
// (bytes, and for devices on rpc-servers what was sent, what came from the server's cache or
// its own copy of the file). The loading itself is core's LoadWeights (core/load_weights.h).
// Not thread-safe: one load per report at a time.
#ifndef TENSORGRID_TOOLS_COMMON_WEIGHT_LOADING_H_
#define TENSORGRID_TOOLS_COMMON_WEIGHT_LOADING_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/weight_source.h"
#include "models/llama_model.h"

namespace tg {

// How one device's weights got there.
struct DeviceLoad {
  std::string device;
  bool remote = false;
  uint64_t bytes = 0;
  uint64_t sent = 0;        // over the network (remote devices).
  uint64_t cached = 0;      // from the server's weight cache.
  uint64_t from_file = 0;   // read by the server from its own copy of the model file.
  uint64_t mapped = 0;      // left in this process's mapping of the file (no copy).
  uint64_t hashed = 0;      // hashed by this process to name them (no .tghash sidecar had it).
  double seconds = 0;       // from the start of the weight load until this device's were in place.
  std::string server_file;  // the server's copy of the file, when it had one.
};

struct LoadReport {
  std::vector<DeviceLoad> devices;
  double seconds = 0;  // all weights.
};

// The report of a load: one entry per device that holds loaded bytes, in first-seen order.
LoadReport LoadReportOf(absl::Span<const LoadStats> stats, double seconds);

// LoadOptions::loaded for a tool: fills `report`, which outlives the model (a failover loads
// again, into the same report).
std::function<void(absl::Span<const LoadStats>, double)> FillLoadReport(LoadReport* report);

// LoadOptions::progress for a tool: "tg-bench: loading [####      ]  40%" redrawn on stderr
// when it is a terminal.
std::function<void(size_t, size_t)> LoadProgressBar(std::string tool);

// --mmap's value: "auto", "on" (weights stay in the mapped file) or "off" (copied).
absl::StatusOr<WeightMapping> ParseWeightMapping(const std::string& value);

// --mmap's help text, the same in every tool.
inline constexpr char kMmapHelp[] =
    "CPU weights: in the mapped file (on), copied onto 2 MiB pages (off), or auto (default: "
    "copied where huge pages are available and they take at most half the free memory)";

// One line per device, e.g.
//   tg-run: load RPC[127.0.0.1:50052]/0: 610.2 MB in 0.52 s: 0.0 MB sent, 0.0 MB from its
//   cache, 610.2 MB from its file m.gguf
std::string FormatLoadReport(const LoadReport& report, const std::string& tool);

}  // namespace tg

#endif  // TENSORGRID_TOOLS_COMMON_WEIGHT_LOADING_H_
