// Helpers shared by the client tests: a real rpc-server on loopback (in-process, exposing
// the local CPU), and a client Connection to it.
#ifndef TENSORGRID_CLIENT_CLIENT_TEST_UTIL_H_
#define TENSORGRID_CLIENT_CLIENT_TEST_UTIL_H_

#include <memory>
#include <utility>

#include "backends/register_builtin.h"
#include "client/connection.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "server/rpc_server.h"

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

}  // namespace tg::rpc::testing

#endif  // TENSORGRID_CLIENT_CLIENT_TEST_UTIL_H_
