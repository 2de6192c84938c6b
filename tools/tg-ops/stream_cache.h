// One Stream per device for a whole tg-ops run: creating a stream starts a thread pool, too
// costly to repeat for each of hundreds of cases.
#ifndef TENSORGRID_TOOLS_TG_OPS_STREAM_CACHE_H_
#define TENSORGRID_TOOLS_TG_OPS_STREAM_CACHE_H_

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/backend.h"

namespace tg::ops_tool {

class StreamCache {
 public:
  // The device's stream, created on first use.
  absl::StatusOr<Stream*> Get(Device& device) {
    auto it = streams_.find(&device);
    if (it != streams_.end()) return it->second.get();
    absl::StatusOr<std::unique_ptr<Stream>> stream = device.CreateStream();
    if (!stream.ok()) return stream.status();
    Stream* raw = stream->get();
    streams_.emplace(&device, std::move(*stream));
    return raw;
  }

 private:
  absl::flat_hash_map<Device*, std::unique_ptr<Stream>> streams_;
};

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_STREAM_CACHE_H_
