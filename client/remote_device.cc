#include "client/remote_device.h"

#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/remote_stream.h"
#include "client/rpc_collectives.h"
#include "core/status_macros.h"
#include "proto/protocol.h"

namespace tg::rpc {

RemoteDevice::RemoteDevice(Connection* connection, const tensorgrid::v1::DeviceInfo& info)
    : connection_(connection),
      index_(info.index()),
      name_(absl::StrCat("RPC[", connection->endpoint(), "]/", info.index())),
      description_(
          absl::StrCat(info.name(), " on ", connection->endpoint(), ": ", info.description())),
      id_(absl::StrCat(connection->endpoint(), "/", info.index())),
      buffer_type_(this, absl::StrCat("RPC[", connection->endpoint(), "]/", info.index()),
                   info.buffer_type().alignment(), info.buffer_type().max_size()) {
  memory_.free = info.memory_free();
  memory_.total = info.memory_total();
  ops_.insert(info.supported_ops().begin(), info.supported_ops().end());
}

absl::StatusOr<std::unique_ptr<Stream>> RemoteDevice::CreateStream() {
  return std::unique_ptr<Stream>(new RemoteStream(this));
}

absl::StatusOr<std::unique_ptr<Event>> RemoteDevice::CreateEvent() {
  return std::unique_ptr<Event>(new RemoteEvent(connection_));
}

Collectives* RemoteDevice::collectives() { return RpcCollectives::Get(); }

bool RemoteDevice::SupportsOp(const Tensor& node) const {
  return node.op == Op::kNone || ops_.contains(static_cast<uint32_t>(node.op));
}

RemoteFamily::RemoteFamily(std::unique_ptr<Connection> connection)
    : connection_(std::move(connection)),
      name_(absl::StrCat("RPC[", connection_->endpoint(), "]")) {
  for (const tensorgrid::v1::DeviceInfo& info : connection_->hello().devices()) {
    devices_.push_back(std::make_unique<RemoteDevice>(connection_.get(), info));
  }
}

std::vector<Device*> RemoteFamily::devices() {
  std::vector<Device*> out;
  for (auto& d : devices_) out.push_back(d.get());
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseEndpoints(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view entry : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    std::string host(entry);
    int port = kDefaultPort;
    const size_t colon = entry.rfind(':');
    const bool bracketed = absl::StartsWith(entry, "[");  // [::1]:50052
    if (colon != absl::string_view::npos && (!bracketed || entry[colon - 1] == ']')) {
      host = std::string(entry.substr(0, colon));
      if (!absl::SimpleAtoi(entry.substr(colon + 1), &port) || port < 1 || port > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("--rpc: bad port in '", entry, "' (want host:port, port 1-65535)"));
      }
    }
    if (host.empty())
      return absl::InvalidArgumentError(absl::StrCat("--rpc: no host in '", entry, "'"));
    out.push_back(absl::StrCat(host, ":", port));
  }
  if (out.empty())
    return absl::InvalidArgumentError("--rpc: no endpoint given (want host:port,...)");
  return out;
}

absl::Status RegisterRemoteDevices(absl::Span<const std::string> endpoints,
                                   const ClientOptions& options) {
  std::vector<std::string> todo;
  for (const std::string& e : endpoints) {
    if (!Registry::Get().HasFamily(absl::StrCat("RPC[", e, "]"))) todo.push_back(e);
  }
  std::vector<absl::StatusOr<std::unique_ptr<Connection>>> connections(todo.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < todo.size(); ++i) {
      threads.emplace_back([&, i] { connections[i] = Connection::Open(todo[i], options); });
    }
    for (std::thread& t : threads) t.join();
  }
  for (auto& c : connections) TG_RETURN_IF_ERROR(c.status());
  for (auto& c : connections) {
    TG_RETURN_IF_ERROR(Registry::Get().Register(std::make_unique<RemoteFamily>(std::move(*c))));
  }
  return absl::OkStatus();
}

}  // namespace tg::rpc
