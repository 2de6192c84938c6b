// rpc_allreduce_client: asks a running rpc-server for one all-reduce among servers that
// names PEER_ENDPOINT as the other server, and prints what it answered; rpc_allreduce_test.py
// drives it against --peers.
//
//   rpc_allreduce_client SERVER PEER_ENDPOINT
//
// Opens a session on SERVER with a 64-byte buffer (16 floats) granted for peers, then sends
// an AllReduce of rank 0 of two servers, SERVER and PEER_ENDPOINT (with a made-up grant).
// Prints "CODE: message" (CODE as absl names it). Exit 0 when the command was answered
// (whatever its code); 1 when the session could not be set up; 2 on bad usage.
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "server/server_testing.h"

namespace {

namespace pb = tensorgrid::v1;
using tg::server::testing::AllocRequest;

constexpr uint64_t kFloats = 16;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: rpc_allreduce_client SERVER PEER_ENDPOINT\n");
    return 2;
  }
  const std::string server = argv[1];
  const std::string peer = argv[2];
  tg::rpc::ClientOptions options;
  options.progress = false;
  auto c = tg::rpc::Connection::Open(server, options);
  if (!c.ok()) {
    std::fprintf(stderr, "cannot open a session on %s: %s\n", server.c_str(),
                 std::string(c.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<pb::SessionReply> alloc = (*c)->Call(AllocRequest(0, 0, kFloats * 4));
  if (!alloc.ok()) {
    std::fprintf(stderr, "alloc: %s\n", std::string(alloc.status().message()).c_str());
    return 1;
  }
  const uint64_t buffer = alloc->alloc_buffer().buffer();
  absl::StatusOr<std::string> grant = (*c)->PeerReadGrant(buffer);
  if (!grant.ok()) {
    std::fprintf(stderr, "grant: %s\n", std::string(grant.status().message()).c_str());
    return 1;
  }
  pb::SessionRequest request;
  pb::AllReduce* ar = request.mutable_all_reduce();
  ar->set_collective(1);
  pb::CollectiveServer* self = ar->add_servers();
  self->set_endpoint(server);
  self->set_grant(*grant);
  pb::CollectiveServer* other = ar->add_servers();
  other->set_endpoint(peer);
  other->set_grant("made-up-grant");
  ar->set_rank(0);
  pb::CollectiveTensor* t = ar->add_tensors();
  t->set_device(0);
  t->set_buffer(buffer);
  t->set_offset(0);
  ar->set_count(kFloats);
  ar->set_device(0);
  absl::StatusOr<pb::SessionReply> r = (*c)->Call(request);
  const absl::Status s = r.status();
  std::printf("%s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
              std::string(s.message()).c_str());
  return 0;
}
