#include "tools/common/weight_loading.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tg {

LoadReport LoadReportOf(absl::Span<const LoadStats> stats, double seconds) {
  LoadReport report;
  report.seconds = seconds;
  absl::flat_hash_map<const Device*, size_t> index;
  for (const LoadStats& s : stats) {
    const Device* device = s.buffer->type()->device();
    auto [it, added] = index.try_emplace(device, report.devices.size());
    if (added) {
      report.devices.push_back(
          {std::string(device->name()), device->type() == DeviceType::kRemote});
    }
    DeviceLoad& d = report.devices[it->second];
    d.bytes += s.bytes;
    d.sent += s.sent;
    d.cached += s.cached;
    d.from_file += s.from_file;
    d.mapped += s.mapped;
    d.hashed += s.hashed;
    d.seconds = std::max(d.seconds, s.seconds);
    if (!s.host_file.empty()) d.server_file = s.host_file;
  }
  return report;
}

std::function<void(absl::Span<const LoadStats>, double)> FillLoadReport(LoadReport* report) {
  return [report](absl::Span<const LoadStats> stats, double seconds) {
    *report = LoadReportOf(stats, seconds);
  };
}

std::function<void(size_t, size_t)> LoadProgressBar(std::string tool) {
  return [tool = std::move(tool), tty = isatty(STDERR_FILENO) != 0](size_t done, size_t total) {
    if (!tty || total == 0) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::fprintf(stderr, "\r%s: loading [%s%s] %3d%%", tool.c_str(),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(),
                 static_cast<int>(100 * done / total));
    if (done >= total) std::fprintf(stderr, "\r\033[K");
  };
}

absl::StatusOr<WeightMapping> ParseWeightMapping(const std::string& value) {
  if (value == "auto") return WeightMapping::kAuto;
  if (value == "on") return WeightMapping::kInPlace;
  if (value == "off") return WeightMapping::kCopy;
  return absl::InvalidArgumentError(
      absl::StrCat("--mmap must be auto, on or off, not '", value, "'"));
}

std::string FormatLoadReport(const LoadReport& report, const std::string& tool) {
  std::string out;
  for (const DeviceLoad& d : report.devices) {
    absl::StrAppendFormat(&out, "%s: load %s: %.1f MB in %.2f s", tool, d.device, d.bytes / 1e6,
                          d.seconds);
    if (d.remote) {
      absl::StrAppendFormat(&out, ": %.1f MB sent, %.1f MB from its cache, %.1f MB from its file",
                            d.sent / 1e6, d.cached / 1e6, d.from_file / 1e6);
      if (!d.server_file.empty()) absl::StrAppend(&out, " ", d.server_file);
    } else if (d.mapped != 0) {
      absl::StrAppendFormat(&out, " (%.1f MB of them used where they lie in the mapped file)",
                            d.mapped / 1e6);
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppendFormat(&out, "%s: load: all weights in %.2f s\n", tool, report.seconds);
  return out;
}

}  // namespace tg
