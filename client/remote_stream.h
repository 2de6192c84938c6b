// An execution queue on a remote device. Compute sends the graph's key (the whole graph
// only the first time), posts without waiting and asks for the graph's small outputs inline,
// so a decode step costs one round trip per device.
#ifndef TENSORGRID_CLIENT_REMOTE_STREAM_H_
#define TENSORGRID_CLIENT_REMOTE_STREAM_H_

#include <atomic>

#include "client/connection.h"
#include "core/backend.h"

namespace tg::rpc {

class RemoteDevice;

class RemoteStream : public Stream {
 public:
  explicit RemoteStream(RemoteDevice* device);

  Device* device() const override;
  absl::Status Synchronize() override;
  absl::Status Compute(Graph& graph) override;
  StreamStats stats() const override;

 private:
  RemoteDevice* device_;
  // Server-side time; written by reply handlers, which run on whichever thread drains.
  std::shared_ptr<std::atomic<int64_t>> compute_ns_;
  std::atomic<int64_t> splits_{0};
};

// Outputs up to this many bytes in total come back with the Compute reply.
inline constexpr size_t kInlineOutputBytes = size_t{1} << 20;

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_REMOTE_STREAM_H_
