// The one way client/ and server/ open a gRPC channel to an rpc-server: message limits of
// the protocol, keepalive so that a dead or hung peer is noticed, TLS when a CA is given,
// and a channel-local subchannel pool. Stateless; safe from any thread.
#ifndef TENSORGRID_PROTO_GRPC_CHANNEL_H_
#define TENSORGRID_PROTO_GRPC_CHANNEL_H_

#include <memory>
#include <string>

namespace grpc {
class Channel;
}  // namespace grpc

namespace tg::rpc {

// TLS material for a channel, as PEM contents (not paths).
struct ChannelTls {
  std::string ca_pem;    // trust these roots (TLS on); empty = plaintext.
  std::string cert_pem;  // client certificate for servers that require mTLS; optional.
  std::string key_pem;   // its private key.
  // The name the server's certificate must carry when it is not the endpoint's host (a
  // server dials a peer by the address it checked; see server/peer_allow_list.h).
  std::string target_name;
};

// A stream with no traffic is pinged every kKeepaliveTimeMs and declared dead when the ping
// is not answered within kKeepaliveTimeoutMs, so a killed, hung or unreachable server is
// noticed within about 4 s (docs/rpc.md, "Failure"). The server accepts pings as often as
// every second (server/rpc_server.cc), so this must not go below 1000.
inline constexpr int kKeepaliveTimeMs = 2000;
inline constexpr int kKeepaliveTimeoutMs = 2000;

// After a connection fails, a channel waits before it dials again, and a call made while it
// waits fails at once with UNAVAILABLE. gRPC's defaults (1 s, growing 1.6x to 120 s) would
// leave a server that restarts unreachable for minutes to a peer or client that saw it go;
// these keep the wait short, so a restarted server is reached again within about a second.
// Dialing a host that stays down once a second costs nothing to speak of.
inline constexpr int kInitialReconnectBackoffMs = 100;
inline constexpr int kMaxReconnectBackoffMs = 1000;

// A channel to `endpoint` ("host:port"). Connects lazily: the first call says whether the
// server can be reached.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint, const ChannelTls& tls);

}  // namespace tg::rpc

#endif  // TENSORGRID_PROTO_GRPC_CHANNEL_H_
