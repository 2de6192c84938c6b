// Remote devices: each device an rpc-server exposes becomes a local Device named
// RPC[host:port]/N (type REMOTE), grouped in one family per server, so the registry, the
// scheduler and the meta backend treat it like any local device.
#ifndef TENSORGRID_CLIENT_REMOTE_DEVICE_H_
#define TENSORGRID_CLIENT_REMOTE_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/connection.h"
#include "client/remote_buffer.h"
#include "core/backend.h"
#include "core/registry.h"

namespace tg::rpc {

class RemoteDevice : public Device {
 public:
  RemoteDevice(Connection* connection, const tensorgrid::v1::DeviceInfo& info);

  absl::string_view name() const override { return name_; }
  absl::string_view description() const override { return description_; }
  DeviceType type() const override { return DeviceType::kRemote; }
  absl::string_view id() const override { return id_; }
  DeviceMemory memory() const override { return memory_; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType* type) const override { return type == &buffer_type_; }
  // A RemoteEvent: a point in this server's command stream.
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  // RpcCollectives: the same for every remote device, so that the meta backend's all-reduce
  // over devices of several servers runs among the servers.
  Collectives* collectives() override;

  Connection* connection() const { return connection_; }
  uint32_t index() const { return index_; }

 private:
  Connection* connection_;
  uint32_t index_;
  std::string name_, description_, id_;
  DeviceMemory memory_;
  absl::flat_hash_set<uint32_t> ops_;
  RemoteBufferType buffer_type_;
};

// One rpc-server: its connection and its devices.
class RemoteFamily : public DeviceFamily {
 public:
  explicit RemoteFamily(std::unique_ptr<Connection> connection);
  absl::string_view name() const override { return name_; }
  std::vector<Device*> devices() override;
  Connection* connection() const { return connection_.get(); }

 private:
  std::unique_ptr<Connection> connection_;  // outlives the devices (declared first).
  std::string name_;
  std::vector<std::unique_ptr<RemoteDevice>> devices_;
};

// Parses "host:port,host:port" (a missing port means 50052). INVALID_ARGUMENT names a bad
// entry.
absl::StatusOr<std::vector<std::string>> ParseEndpoints(absl::string_view list);

// Connects to every endpoint (in parallel) and registers its devices. Endpoints already
// registered are skipped. Errors name the endpoint.
absl::Status RegisterRemoteDevices(absl::Span<const std::string> endpoints,
                                   const ClientOptions& options);

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_REMOTE_DEVICE_H_
