// How the tools write a model's weights (LoadOptions::write_weights): buffers on rpc-servers
// go through rpc::UploadModelWeights (every server at once, hashes from the .tghash sidecar,
// a server's own copy of the file under --model-dir, its weight cache), local buffers get
// Buffer::SetTensor meanwhile. Fills the per-device load report that tg-run -v and tg-bench
// print. Not thread-safe: one load per writer.
#ifndef TENSORGRID_TOOLS_COMMON_WEIGHT_LOADING_H_
#define TENSORGRID_TOOLS_COMMON_WEIGHT_LOADING_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/model_upload.h"
#include "models/gguf_file.h"
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
  double seconds = 0;       // from the start of the weight load until this device's were in place.
  std::string server_file;  // the server's copy of the file, when it had one.
};

struct LoadReport {
  std::vector<DeviceLoad> devices;
  double seconds = 0;  // all weights.
};

struct WeightLoadingOptions {
  bool progress = true;  // a progress line on a terminal.
  // Called with (bytes done, bytes total) while only local devices are written.
  std::function<void(size_t, size_t)> local_progress;
  std::string tool;  // prefixes warnings ("tg-run").
};

// The mapped file as the RPC loader sees it: bytes, where the tensor data starts, every
// tensor's extent in the file.
rpc::ModelFileView ModelFileViewOf(const GgufFile& file);

// A writer that fills `report` (may be null) as it goes.
WeightWriter ToolWeightWriter(const WeightLoadingOptions& options, LoadReport* report);

// One line per device, e.g.
//   tg-run: load RPC[127.0.0.1:50052]/0: 610.2 MB in 0.52 s: 0.0 MB sent, 0.0 MB from its
//   cache, 610.2 MB from its file m.gguf
std::string FormatLoadReport(const LoadReport& report, const std::string& tool);

}  // namespace tg

#endif  // TENSORGRID_TOOLS_COMMON_WEIGHT_LOADING_H_
