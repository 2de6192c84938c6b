#include "server/rpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "server/blob_cache.h"
#include "server/metrics.h"
#include "server/model_dir.h"
#include "server/model_index.h"
#include "server/service.h"

namespace tg::server {
namespace {

// Drops gRPC's reflection plugin from one builder (another server of this process may have
// initialised it, which adds it to all of them).
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
      return p->name() == "proto_server_reflection";
    });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(const ServerConfig& config) {
  if (config.devices.empty()) return absl::InvalidArgumentError("no devices to serve");
  if (config.tls_cert_pem.empty() != config.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  if (!config.tls_client_ca_pem.empty() && config.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError("a client CA (mTLS) needs a server certificate and key");
  }
  std::unique_ptr<RpcServer> s(new RpcServer());
  s->host_ = config.host;
  s->metrics_ = std::make_unique<Metrics>();
  if (config.metrics_port.has_value()) {
    TG_RETURN_IF_ERROR(
        s->metrics_->StartExposer(config.metrics_host, *config.metrics_port, config.metrics_token));
  }
  if (!config.cache_dir.empty()) {
    TG_ASSIGN_OR_RETURN(s->cache_, BlobCache::Open(config.cache_dir, config.cache_max_bytes));
    s->metrics_->SetCacheBytes(s->cache_->total_bytes());
  }
  if (!config.model_dirs.empty()) {
    ModelIndexOptions index;
    for (const std::string& dir : config.model_dirs) {
      TG_ASSIGN_OR_RETURN(ModelDir d, OpenModelDir(dir));
      index.dirs.push_back(std::move(d));
    }
    index.cache_dir = config.cache_dir;
    index.threads = config.index_threads;
    index.metrics = s->metrics_.get();
    s->models_ = std::make_unique<ModelIndex>(std::move(index));
  }
  ServiceOptions options;
  options.devices = config.devices;
  options.auth_token = config.auth_token;
  options.client_tokens = config.client_tokens;
  options.client_mem_limit = config.client_mem_limit;
  options.client_max_sessions = config.client_max_sessions;
  options.max_sessions = config.max_sessions;
  options.session_mem_limit = config.session_mem_limit;
  s->budget_ = std::make_unique<ServerMemoryBudget>(config.mem_budget, s->metrics_.get());
  options.budget = s->budget_.get();
  options.max_buffers_per_session = config.max_buffers_per_session;
  options.cache = s->cache_.get();
  options.models = s->models_.get();
  options.metrics = s->metrics_.get();
  options.peer = config.peer;
  options.stream_idle_timeout = config.stream_idle_timeout;
  s->service_ = std::make_unique<TensorGridService>(std::move(options));

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (config.tls_cert_pem.empty()) {
    creds = grpc::InsecureServerCredentials();
  } else {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({config.tls_key_pem, config.tls_cert_pem});
    if (!config.tls_client_ca_pem.empty()) {
      ssl.pem_root_certs = config.tls_client_ca_pem;
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // The reflection plugin, once initialised, is added to every builder of the process; an
  // option on this builder takes it off again when reflection is not wanted.
  if (config.reflection) {
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  } else {
    builder.SetOption(std::make_unique<WithoutReflection>());
  }
  int port = 0;
  builder.AddListeningPort(JoinHostPort(config.host, config.port), creds, &port);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(rpc::kMaxMessageBytes));
  builder.SetMaxSendMessageSize(static_cast<int>(rpc::kMaxMessageBytes));
  // Notice dead clients (their sessions then free everything), and let live clients ping
  // as often as every second without being told off.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", JoinHostPort(config.host, config.port)));
  }
  s->port_ = port;
  // Links are plaintext: only a server whose calls are too offers them.
  if (config.peer_link_port.has_value() && config.tls_cert_pem.empty()) {
    TG_RETURN_IF_ERROR(s->service_->links().Listen(config.host, *config.peer_link_port));
  }
  return s;
}

RpcServer::~RpcServer() { Shutdown(0); }

void RpcServer::Shutdown(int grace_ms) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server_->Wait();
}

void RpcServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace tg::server
