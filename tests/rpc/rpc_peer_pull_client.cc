// rpc_peer_pull_client: asks a running rpc-server for one PeerPull and prints what it
// answered; rpc_peers_test.py drives it against --peers and --peer-tls-* setups.
//
//   rpc_peer_pull_client SERVER PEER_ENDPOINT [--grant-from HOST:PORT]
//                        [--tls-ca F [--tls-cert F --tls-key F]]
//
// Opens a session on SERVER and a 64-byte buffer there, then has SERVER pull 64 bytes from
// PEER_ENDPOINT: with --grant-from, from a buffer of a session on that server filled with a
// known pattern and granted for reading (the pulled bytes are read back and compared);
// otherwise with a made-up grant. Prints "CODE: message" (CODE as absl names it) and, after
// a good pull, "data: same" or "data: differs". Exit 0 when the pull was asked and
// answered (whatever its code) and no data differ; 1 when a session could not be set up or
// data differ; 2 on bad usage.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "client/connection.h"
#include "server/server_testing.h"

namespace {

namespace pb = tensorgrid::v1;
using tg::server::testing::AllocRequest;
using tg::server::testing::ReadRequest;
using tg::server::testing::WriteRequest;

constexpr uint64_t kBytes = 64;

std::string ReadFileOrEmpty(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Args {
  std::string server, peer, grant_from, ca, cert, key;
};

bool ParseArgs(int argc, char** argv, Args& a) {
  if (argc < 3) return false;
  a.server = argv[1];
  a.peer = argv[2];
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    std::string* value = flag == "--grant-from" ? &a.grant_from
                         : flag == "--tls-ca"   ? &a.ca
                         : flag == "--tls-cert" ? &a.cert
                         : flag == "--tls-key"  ? &a.key
                                                : nullptr;
    if (value == nullptr) return false;
    *value = argv[i + 1];
  }
  return argc % 2 == 1;
}

absl::StatusOr<uint64_t> Alloc(tg::rpc::Connection& c) {
  absl::StatusOr<pb::SessionReply> r = c.Call(AllocRequest(0, 0, kBytes));
  if (!r.ok()) return r.status();
  return r->alloc_buffer().buffer();
}

std::string Pattern() {
  std::string s(kBytes, '\0');
  for (uint64_t i = 0; i < kBytes; ++i) s[i] = static_cast<char>('A' + i % 26);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, a)) {
    std::fprintf(stderr,
                 "usage: rpc_peer_pull_client SERVER PEER_ENDPOINT [--grant-from HOST:PORT] "
                 "[--tls-ca F [--tls-cert F --tls-key F]]\n");
    return 2;
  }
  tg::rpc::ClientOptions options;
  options.progress = false;
  options.tls_ca_pem = ReadFileOrEmpty(a.ca);
  options.tls_cert_pem = ReadFileOrEmpty(a.cert);
  options.tls_key_pem = ReadFileOrEmpty(a.key);
  auto server = tg::rpc::Connection::Open(a.server, options);
  if (!server.ok()) {
    std::fprintf(stderr, "cannot open a session on %s: %s\n", a.server.c_str(),
                 std::string(server.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<uint64_t> dst = Alloc(**server);
  std::string grant = "made-up-grant";
  std::unique_ptr<tg::rpc::Connection> source;  // keeps the granted buffer alive.
  if (!a.grant_from.empty()) {
    auto src = tg::rpc::Connection::Open(a.grant_from, options);
    absl::StatusOr<uint64_t> buffer = src.ok() ? Alloc(**src) : src.status();
    absl::StatusOr<pb::SessionReply> g = absl::UnknownError("not asked");
    if (!buffer.ok()) {
      g = buffer.status();
    } else if (g = (*src)->Call(WriteRequest(0, *buffer, 0, Pattern())); g.ok()) {
      pb::SessionRequest r;
      r.mutable_grant_peer_read()->set_buffer(*buffer);
      g = (*src)->Call(r);
    }
    if (!g.ok()) {
      std::fprintf(stderr, "cannot get a grant from %s: %s\n", a.grant_from.c_str(),
                   std::string(g.status().message()).c_str());
      return 1;
    }
    grant = g->grant().grant();
    source = std::move(*src);
  }
  if (!dst.ok()) {
    std::fprintf(stderr, "alloc: %s\n", std::string(dst.status().message()).c_str());
    return 1;
  }
  pb::SessionRequest pull;
  pb::PeerPull* p = pull.mutable_peer_pull();
  p->set_endpoint(a.peer);
  p->set_grant(grant);
  p->set_size(kBytes);
  p->set_dst_buffer(*dst);
  absl::StatusOr<pb::SessionReply> r = (*server)->Call(pull);
  std::printf("%s: %s\n", absl::StatusCodeToString(r.status().code()).c_str(),
              std::string(r.status().message()).c_str());
  if (!r.ok() || source == nullptr) return 0;
  absl::StatusOr<pb::SessionReply> back = (*server)->Call(ReadRequest(0, *dst, 0, kBytes));
  const bool same = back.ok() && back->read().data() == Pattern();
  std::printf("data: %s\n", same ? "same" : "differs");
  return same ? 0 : 1;
}
