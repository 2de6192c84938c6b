// Helpers shared by the client tests: a real rpc-server on loopback (in-process, exposing
// the local CPU), and a client Connection to it; rpc-server's service showing an older
// protocol minor, on a loopback port of its own; a set of such servers with a client
// RemoteFamily on each (LoopbackServers).
#ifndef TENSORGRID_CLIENT_CLIENT_TESTING_H_
#define TENSORGRID_CLIENT_CLIENT_TESTING_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/register_builtin.h"
#include "client/connection.h"
#include "client/remote_device.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "proto/upload_frame.h"
#include "server/rpc_server.h"
#include "server/service.h"

namespace tg::rpc::testing {

class LoopbackServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    server::ServerConfig config;
    config.port = 0;
    config.devices = {Registry::Get().CpuDevice()};
    ASSERT_NE(config.devices[0], nullptr);
    auto server = server::RpcServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(0);
  }

  std::unique_ptr<Connection> Connect() {
    ClientOptions options;
    options.progress = false;
    auto connection = Connection::Open(server_->address(), options);
    EXPECT_TRUE(connection.ok()) << connection.status();
    return connection.ok() ? std::move(*connection) : nullptr;
  }

  std::unique_ptr<server::RpcServer> server_;
};

// rpc-server's service as a server of an older protocol minor shows itself: its Hello
// reports `minor`, so that a client does not use what came after it.
class OlderMinorService final : public tensorgrid::v1::TensorGrid::Service {
 public:
  OlderMinorService(server::ServiceOptions options, uint32_t minor)
      : inner_(std::move(options)), minor_(minor) {
    // Session and Upload run on raw byte buffers (proto/upload_frame.h), Upload on the
    // callback API, as rpc-server serves them; gRPC owns method handlers and takes them as
    // raw pointers. Session is the service's method 1 (the proto's order).
    MarkMethodStreamed(
        1,
        new grpc::internal::BidiStreamingHandler<OlderMinorService, grpc::ByteBuffer,
                                                 tensorgrid::v1::SessionReply>(
            [](OlderMinorService* service, grpc::ServerContext* context,
               grpc::ServerReaderWriter<tensorgrid::v1::SessionReply, grpc::ByteBuffer>* stream) {
              return service->inner_.SessionRaw(context, stream);
            },
            this));
    MarkMethodCallback(
        rpc::kUploadMethodIndex,
        new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, tensorgrid::v1::UploadReply>(
            [this](grpc::CallbackServerContext* context) {
              return inner_.UploadReactor(context);
            }));
  }
  grpc::Status Hello(grpc::ServerContext* context, const tensorgrid::v1::HelloRequest* request,
                     tensorgrid::v1::HelloReply* reply) override {
    grpc::Status s = inner_.Hello(context, request, reply);
    reply->set_protocol_minor(minor_);
    return s;
  }
  grpc::Status Download(grpc::ServerContext* context,
                        const tensorgrid::v1::DownloadRequest* request,
                        grpc::ServerWriter<tensorgrid::v1::DataChunk>* writer) override {
    return inner_.Download(context, request, writer);
  }
  grpc::Status PeerCopy(grpc::ServerContext* context,
                        const tensorgrid::v1::PeerCopyRequest* request,
                        grpc::ServerWriter<tensorgrid::v1::DataChunk>* writer) override {
    return inner_.PeerCopy(context, request, writer);
  }

 private:
  server::TensorGridService inner_;
  const uint32_t minor_;
};

// Serves `service` on a free loopback port (set in *port) with rpc-server's message limits
// and keepalive policy; null when it cannot start.
inline std::unique_ptr<grpc::Server> ServeOnLoopback(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  builder.SetMaxSendMessageSize(static_cast<int>(kMaxMessageBytes));
  // The client pings every 2 s (proto/grpc_channel.h): let it.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  return builder.BuildAndStart();
}

// rpc-servers on loopback (in-process), current ones and one of an older protocol minor, and
// a client RemoteFamily connected to each; devices() lists their devices in start order.
class LoopbackServers {
 public:
  ~LoopbackServers() { Stop(); }

  // A server exposing `devices` (a Device listed twice is two devices of the server).
  void Start(std::vector<Device*> devices) {
    server::ServerConfig config;
    config.port = 0;
    config.devices = std::move(devices);
    auto server = server::RpcServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    servers_.push_back(std::move(*server));
    Connect(servers_.back()->address());
  }
  // A server of protocol minor `minor` (OlderMinorService) exposing `devices`.
  void StartOlder(std::vector<Device*> devices, uint32_t minor) {
    server::ServiceOptions options;
    options.devices = std::move(devices);
    older_service_ = std::make_unique<OlderMinorService>(options, minor);
    int port = 0;
    older_server_ = ServeOnLoopback(older_service_.get(), &port);
    ASSERT_NE(older_server_, nullptr);
    Connect("127.0.0.1:" + std::to_string(port));
  }
  // The client side first, then the servers.
  void Stop() {
    families_.clear();
    devices_.clear();
    for (auto& s : servers_) {
      if (s != nullptr) s->Shutdown(0);
    }
    if (older_server_ != nullptr) older_server_->Shutdown();
  }

  std::vector<Device*>& devices() { return devices_; }
  // The i-th current server started (tests stop or destroy it to lose it).
  std::unique_ptr<server::RpcServer>& server(size_t i) { return servers_[i]; }

 private:
  void Connect(const std::string& address) {
    ClientOptions options;
    options.progress = false;
    auto connection = Connection::Open(address, options);
    ASSERT_TRUE(connection.ok()) << connection.status();
    families_.push_back(std::make_unique<RemoteFamily>(std::move(*connection)));
    for (Device* d : families_.back()->devices()) devices_.push_back(d);
  }

  std::vector<std::unique_ptr<server::RpcServer>> servers_;
  std::unique_ptr<OlderMinorService> older_service_;
  std::unique_ptr<grpc::Server> older_server_;
  std::vector<std::unique_ptr<RemoteFamily>> families_;
  std::vector<Device*> devices_;
};

}  // namespace tg::rpc::testing

#endif  // TENSORGRID_CLIENT_CLIENT_TESTING_H_
