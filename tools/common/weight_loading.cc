#include "tools/common/weight_loading.h"

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/remote_buffer.h"
#include "core/status_macros.h"

namespace tg {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Writes weights through Buffer::SetTensor in file order. The report has one entry per device
// that ends up holding bytes (Buffer::Parts: under -sm tensor each device's slices, so each
// server's devices get their lines); a remote device's bytes were all sent.
absl::Status WriteLocal(absl::Span<const WeightWrite> writes, Clock::time_point start,
                        const std::function<void(size_t, size_t)>& progress,
                        std::vector<DeviceLoad>* out) {
  size_t total = 0, done = 0;
  for (const WeightWrite& w : writes) total += w.info->nbytes;
  absl::flat_hash_map<const Device*, size_t> index;
  for (const WeightWrite& w : writes) {
    TG_RETURN_IF_ERROR(w.buffer->SetTensor(w.tensor, w.info->data, 0, w.info->nbytes));
    for (const TensorPart& part : w.buffer->Parts(*w.tensor)) {
      const Device* device = part.buffer->type()->device();
      auto [it, added] = index.try_emplace(device, out->size());
      if (added) {
        out->push_back({std::string(device->name()), device->type() == DeviceType::kRemote});
      }
      DeviceLoad& d = (*out)[it->second];
      d.bytes += part.bytes;
      if (d.remote) d.sent += part.bytes;
      d.seconds = Since(start);
    }
    done += w.info->nbytes;
    if (progress) progress(done, total);
  }
  return absl::OkStatus();
}

absl::Status WriteRemote(const GgufFile& file, absl::Span<const WeightWrite> writes,
                         const WeightLoadingOptions& options, std::vector<DeviceLoad>* out) {
  std::vector<rpc::WeightCopy> copies;
  for (const WeightWrite& w : writes) {
    auto* buffer = static_cast<rpc::RemoteBuffer*>(w.buffer);
    const uint64_t file_offset = static_cast<uint64_t>(w.info->data - file.bytes().data());
    copies.push_back({buffer, buffer->OffsetOf(*w.tensor), {file_offset, w.info->nbytes}});
  }
  rpc::ModelUploadOptions upload;
  upload.progress = options.progress;
  upload.warn = [tool = options.tool](const std::string& message) {
    std::fprintf(stderr, "%s: warning: %s\n", tool.c_str(), message.c_str());
  };
  TG_ASSIGN_OR_RETURN(std::vector<rpc::BufferLoad> loads,
                      rpc::UploadModelWeights(ModelFileViewOf(file), copies, upload));
  for (const rpc::BufferLoad& l : loads) {
    out->push_back({std::string(l.buffer->type()->device()->name()), true, l.bytes, l.sent,
                    l.cached, l.from_file, l.seconds, l.model_file});
  }
  return absl::OkStatus();
}

}  // namespace

rpc::ModelFileView ModelFileViewOf(const GgufFile& file) {
  rpc::ModelFileView view;
  view.path = file.path();
  view.bytes = file.bytes();
  view.data_start = static_cast<uint64_t>(file.data_section() - file.bytes().data());
  for (const GgufTensorInfo& t : file.tensors()) {
    view.tensors.push_back({view.data_start + t.offset, t.nbytes});
  }
  return view;
}

WeightWriter ToolWeightWriter(const WeightLoadingOptions& options, LoadReport* report) {
  return [options, report](const GgufFile& file, absl::Span<const WeightWrite> writes) {
    const Clock::time_point start = Clock::now();
    std::vector<WeightWrite> remote, local;
    for (const WeightWrite& w : writes) {
      (dynamic_cast<rpc::RemoteBuffer*>(w.buffer) != nullptr ? remote : local).push_back(w);
    }
    std::vector<DeviceLoad> local_loads, remote_loads;
    absl::Status local_status;
    // Local copies run while the servers load.
    std::thread local_thread([&] {
      local_status =
          WriteLocal(local, start, remote.empty() ? options.local_progress : nullptr, &local_loads);
    });
    absl::Status remote_status =
        remote.empty() ? absl::OkStatus() : WriteRemote(file, remote, options, &remote_loads);
    local_thread.join();
    TG_RETURN_IF_ERROR(remote_status);
    TG_RETURN_IF_ERROR(local_status);
    if (report != nullptr) {
      report->devices = std::move(local_loads);
      for (DeviceLoad& d : remote_loads) report->devices.push_back(std::move(d));
      report->seconds = Since(start);
    }
    return absl::OkStatus();
  };
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
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppendFormat(&out, "%s: load: all weights in %.2f s\n", tool, report.seconds);
  return out;
}

}  // namespace tg
