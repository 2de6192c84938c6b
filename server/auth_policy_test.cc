// Tests of the auth table and its enforcement. The table: every method of the
// tensorgrid.v1.TensorGrid service, read from the generated descriptor, has exactly one line,
// and every line names a method of the service (a method added to the proto fails here until
// its line says who may call it); none is open. The enforcement: every method of the
// descriptor, called on a real server on loopback through a generic stub (so that a handler
// that forgets to ask the policy is caught too), is refused without the token
// (UNAUTHENTICATED) and with a wrong one (PERMISSION_DENIED), and passes the check with it;
// a server whose --peers does not allow loopback refuses exactly the table's peer methods,
// naming the method; a method the table lacks is refused to everyone.
#include "server/auth_policy.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "server/rpc_server.h"
#include "server/server_testing.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"

namespace tg::server {
namespace {

const google::protobuf::ServiceDescriptor& TensorGridService() {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "tensorgrid.v1.TensorGrid");
  EXPECT_NE(service, nullptr);
  return *service;
}

std::vector<std::string> MethodsOfTheService() {
  std::vector<std::string> out;
  const google::protobuf::ServiceDescriptor& service = TensorGridService();
  for (int i = 0; i < service.method_count(); ++i) out.push_back(service.method(i)->name());
  return out;
}

TEST(AuthTable, EveryMethodOfTheServiceHasExactlyOneLineAndNoLineIsStale) {
  const std::vector<std::string> methods = MethodsOfTheService();
  ASSERT_GE(methods.size(), 9u);  // Hello ... FillPieces when this test was written.
  for (const std::string& m : methods) {
    EXPECT_NE(FindMethodAuth(m), nullptr)
        << m << " has no line in kMethodCallers (server/auth_policy.h): say who may call it";
  }
  absl::flat_hash_set<std::string> seen;
  const absl::flat_hash_set<std::string> known(methods.begin(), methods.end());
  for (const MethodAuth& line : kMethodCallers) {
    EXPECT_TRUE(seen.insert(std::string(line.method)).second) << line.method << " twice";
    EXPECT_TRUE(known.contains(line.method)) << line.method << " is not a method of the service";
    EXPECT_NE(line.caller, Caller::kAnyone) << line.method << " is open to anyone";
    EXPECT_FALSE(line.label.empty()) << line.method;
  }
  EXPECT_EQ(FindMethodAuth("NoSuchMethod"), nullptr);
}

TEST(AuthTable, AMethodTheTableLacksIsRefusedToEveryone) {
  const AuthPolicy open("", PeerAllowList::Default());
  grpc::ServerContext context;  // no call: no metadata, no address.
  const grpc::Status refused = open.Check(context, "NoSuchMethod");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(refused.error_message().find("NoSuchMethod"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("auth table"), std::string::npos);
  // A client method of a server without a token is open; with one it needs it.
  EXPECT_TRUE(open.Check(context, "Hello").ok());
  const AuthPolicy closed("tok", PeerAllowList::Default());
  EXPECT_EQ(closed.Check(context, "Hello").error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(ClientTokens, ParseTakesNamedTokensAndNamesTheLineOfAnyMistake) {
  absl::StatusOr<std::vector<ClientToken>> ok = ParseClientTokens(
      "# tenants\n\nalice  alice-token-0123456789\n\tbob.b-2 bob-token-0123456789  \n", "t.txt",
      "cluster");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].name, "alice");
  EXPECT_EQ((*ok)[0].token, "alice-token-0123456789");
  EXPECT_EQ((*ok)[1].name, "bob.b-2");
  const struct {
    const char* text;
    const char* want;  // in the message, after "t.txt:LINE: ".
  } bad[] = {
      {"alice\n", "t.txt:1: want 'NAME TOKEN', got 1 fields"},
      {"a b c\n", "t.txt:1: want 'NAME TOKEN', got 3 fields"},
      {"\n1alice alice-token-0123456789\n", "t.txt:2: client name '1alice' must start"},
      {"al:ice alice-token-0123456789\n", "client name 'al:ice'"},
      {"alice short\n", "the token of client alice has 5 characters; it needs 16"},
      {"alice alice-token-0123456789\nalice other-token-0123456789\n",
       "t.txt:2: client alice is named twice"},
      {"alice alice-token-0123456789\nbob alice-token-0123456789\n",
       "t.txt:2: client bob's token is another client's too"},
      {"alice cluster-token-0123456789\n", "the --auth-token-file token"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.text);
    absl::StatusOr<std::vector<ClientToken>> got =
        ParseClientTokens(b.text, "t.txt", "cluster-token-0123456789");
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(b.want), std::string::npos) << got.status();
  }
}

TEST(ClientTokens, AddressHostDropsThePortOnly) {
  const std::pair<const char*, const char*> cases[] = {
      {"127.0.0.1:5432", "127.0.0.1"},         {"[::1]:5432", "[::1]"},
      {"[fe80::1%eth0]:80", "[fe80::1%eth0]"}, {"10.0.0.7", "10.0.0.7"},
      {"unix:/tmp/sock", "unix:/tmp/sock"},    {"", ""}};
  for (const auto& [address, host] : cases) EXPECT_EQ(AddressHost(address), host) << address;
}

// Calls `method` of the service with one empty message and `token` (none when empty),
// reading whatever comes back, and returns the call's status.
grpc::Status CallWithEmptyMessage(const std::shared_ptr<grpc::Channel>& channel,
                                  const std::string& method, const std::string& token) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::CompletionQueue cq;
  const std::string path = absl::StrCat("/tensorgrid.v1.TensorGrid/", method);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, path, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](void* want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  if (step(reinterpret_cast<void*>(1))) {
    grpc::Slice empty("");
    grpc::ByteBuffer message(&empty, 1);
    call->Write(message, reinterpret_cast<void*>(2));
    if (step(reinterpret_cast<void*>(2))) {
      call->WritesDone(reinterpret_cast<void*>(3));
      step(reinterpret_cast<void*>(3));
    }
    grpc::ByteBuffer reply;
    for (;;) {
      call->Read(&reply, reinterpret_cast<void*>(4));
      if (!step(reinterpret_cast<void*>(4))) break;
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(reinterpret_cast<void*>(5));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

bool RefusedByAuth(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
}

class AuthEnforcementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = testing::TwoCpuDevices();
    ASSERT_FALSE(devices_.empty());
  }
  std::unique_ptr<RpcServer> Start(const std::string& token, PeerAllowList peers) {
    ServerConfig config;
    config.port = 0;
    config.metrics_port = 0;
    config.devices = devices_;
    config.auth_token = token;
    config.peer.allowed = std::move(peers);
    absl::StatusOr<std::unique_ptr<RpcServer>> server = RpcServer::Start(config);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  std::vector<Device*> devices_;
};

TEST_F(AuthEnforcementTest, EveryMethodAsksThePolicyFirst) {
  std::unique_ptr<RpcServer> server = Start("tok", PeerAllowList::Default());
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  for (const std::string& method : MethodsOfTheService()) {
    SCOPED_TRACE(method);
    const grpc::Status none = CallWithEmptyMessage(channel, method, "");
    EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED) << none.error_message();
    const grpc::Status wrong = CallWithEmptyMessage(channel, method, "wrong");
    EXPECT_EQ(wrong.error_code(), grpc::StatusCode::PERMISSION_DENIED) << wrong.error_message();
    // The token passes the check (loopback is an allowed peer by default); what follows is
    // the method's own answer to an empty message.
    const grpc::Status right = CallWithEmptyMessage(channel, method, "tok");
    EXPECT_FALSE(RefusedByAuth(right)) << right.error_code() << " " << right.error_message();
  }
}

TEST_F(AuthEnforcementTest, PeersNotAllowedAreRefusedExactlyTheTablesPeerMethods) {
  absl::StatusOr<PeerAllowList> elsewhere = PeerAllowList::Parse("10.9.9.9");
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  std::unique_ptr<RpcServer> server = Start("tok", *elsewhere);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  int peer_methods = 0;
  for (const std::string& method : MethodsOfTheService()) {
    SCOPED_TRACE(method);
    const MethodAuth* line = FindMethodAuth(method);
    ASSERT_NE(line, nullptr);
    const grpc::Status s = CallWithEmptyMessage(channel, method, "tok");
    if (line->caller == Caller::kPeer) {
      ++peer_methods;
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
      EXPECT_NE(s.error_message().find(std::string(line->label) + ": "), std::string::npos)
          << s.error_message();
    } else {
      EXPECT_FALSE(RefusedByAuth(s)) << s.error_code() << " " << s.error_message();
    }
  }
  EXPECT_GE(peer_methods, 4);  // PeerCopy, PeerReduce, PeerReduceStream, PeerDeliver.
}

TEST_F(AuthEnforcementTest, AServerWithoutATokenTakesEveryClientMethod) {
  std::unique_ptr<RpcServer> server = Start("", PeerAllowList::Default());
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  for (const std::string& method : MethodsOfTheService()) {
    SCOPED_TRACE(method);
    const grpc::Status s = CallWithEmptyMessage(channel, method, "");
    EXPECT_FALSE(RefusedByAuth(s)) << s.error_code() << " " << s.error_message();
  }
}

}  // namespace
}  // namespace tg::server
