#include "proto/grpc_channel.h"

#include <grpcpp/grpcpp.h>

#include "proto/protocol.h"

namespace tg::rpc {

std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint, const ChannelTls& tls) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls.ca_pem.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = tls.ca_pem;
    ssl.pem_cert_chain = tls.cert_pem;
    ssl.pem_private_key = tls.key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  if (!tls.ca_pem.empty() && !tls.target_name.empty()) {
    args.SetSslTargetNameOverride(tls.target_name);
  }
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  args.SetMaxSendMessageSize(static_cast<int>(kMaxMessageBytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  // Pings also while no call is open (an idle session between commands), with no cap on
  // pings between data frames: the stream may be quiet for minutes.
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: in this gRPC it is also the least time one
  // connection attempt gets (20 s), which a TLS handshake over a slow link needs.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  // Each channel gets its own TCP connection: two clients of one server in a process (or a
  // server's peer channel and a client's) do not share one connection's flow-control window.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(endpoint, credentials, args);
}

}  // namespace tg::rpc
