#include "server/health_probe.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cli/flag_file.h"
#include "core/status_macros.h"
#include "health_probe.grpc.pb.h"
#include "server/host_port.h"
#include "server/log.h"

namespace tg::server {
namespace {

namespace health = ::grpc::health::v1;

// What the health port leaves for its own reply when it forwards a check within the caller's
// deadline (the kubelet's default probe timeout is 1 s).
constexpr absl::Duration kForwardMargin = absl::Milliseconds(50);
// How long the health port reuses the main port's answer: a probe every second at most, so
// a flood of checks cannot make the server dial itself per check (a probe runs each
// second or so; a kubelet's period is 10 s by default).
constexpr absl::Duration kHealthAnswerTtl = absl::Seconds(1);
// Service names a check may ask about come from the network: the answers kept are bounded.
constexpr size_t kMaxCachedServices = 16;

// The DER bytes of the first certificate in `pem`, so two encodings of one certificate
// compare equal.
absl::StatusOr<std::string> FirstCertDer(absl::string_view pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return absl::ResourceExhaustedError("BIO_new_mem_buf failed");
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) return absl::InvalidArgumentError("no PEM certificate found");
  unsigned char* der = nullptr;
  const int n = i2d_X509(cert, &der);
  X509_free(cert);
  if (n <= 0) return absl::InvalidArgumentError("certificate cannot be DER-encoded");
  std::string out(reinterpret_cast<const char*>(der), static_cast<size_t>(n));
  OPENSSL_free(der);
  return out;
}

// Accepts exactly one server certificate: the server's own, which the probe holds.
class PinnedCertVerifier : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit PinnedCertVerifier(std::string der) : der_(std::move(der)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    const grpc::string_ref peer = request->peer_cert();
    absl::StatusOr<std::string> der = FirstCertDer(absl::string_view(peer.data(), peer.size()));
    *sync_status = der.ok() && *der == der_
                       ? grpc::Status::OK
                       : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                      "the server's certificate is not the pinned --tls-cert");
    return true;  // decided synchronously.
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  std::string der_;
};

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ProbeCredentials(
    const HealthProbeOptions& o) {
  if (!o.ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.ca_pem;
    return grpc::SslCredentials(ssl);
  }
  if (o.pinned_cert_pem.empty()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<std::string> der = FirstCertDer(o.pinned_cert_pem);
  if (!der.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pinned certificate: ", der.status().message()));
  }
  grpc::experimental::TlsChannelCredentialsOptions tls;
  // Roots are never consulted (the pin decides), but without any gRPC loads the system's,
  // which a minimal image does not have.
  tls.set_certificate_provider(
      std::make_shared<grpc::experimental::StaticDataCertificateProvider>(o.pinned_cert_pem));
  tls.watch_root_certs();
  tls.set_verify_server_certs(false);  // the pin below replaces chain and host name checks.
  tls.set_check_call_host(false);
  tls.set_certificate_verifier(
      grpc::experimental::ExternalCertificateVerifier::Create<PinnedCertVerifier>(*der));
  return grpc::experimental::TlsCredentials(tls);
}

absl::Status FromCheck(const HealthProbeOptions& o, const grpc::Status& st,
                       health::HealthCheckResponse::ServingStatus status) {
  const std::string what = o.service.empty() ? "" : absl::StrCat(" (service '", o.service, "')");
  if (!st.ok()) {
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
      return absl::NotFoundError(absl::StrCat(o.target, what, ": unknown service"));
    }
    return absl::UnavailableError(
        absl::StrCat(o.target, what, " does not answer health checks: ", st.error_message()));
  }
  if (status != health::HealthCheckResponse::SERVING) {
    return absl::FailedPreconditionError(absl::StrCat(
        o.target, what, " is ", health::HealthCheckResponse::ServingStatus_Name(status)));
  }
  return absl::OkStatus();
}

// Drops the server plugins other builders added process-wide (reflection), so the health
// port serves grpc.health.v1 and nothing else.
class NoPluginsOption : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->clear();
  }
};

}  // namespace

// Not proto/grpc_channel's NewChannel: the pin needs credentials it does not make, and a
// probe's channel lives for one call (no keepalive to set).
absl::Status ProbeHealth(const HealthProbeOptions& options) {
  TG_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds, ProbeCredentials(options));
  grpc::ChannelArguments args;
  // A probe is a fresh process or a fresh check: no cached subchannel to share.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.target, creds, args);
  std::unique_ptr<health::Health::Stub> stub = health::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
  if (!options.token.empty()) context.AddMetadata("authorization", "Bearer " + options.token);
  health::HealthCheckRequest request;
  request.set_service(options.service);
  health::HealthCheckResponse response;
  const grpc::Status st = stub->Check(&context, request, &response);
  return FromCheck(options, st, response.status());
}

absl::StatusOr<std::string> ProbeTarget(absl::string_view spec) {
  std::string host = "127.0.0.1";
  absl::string_view port_text = spec;
  if (const size_t colon = spec.rfind(':'); colon != absl::string_view::npos) {
    host = std::string(spec.substr(0, colon));
    port_text = spec.substr(colon + 1);
    const bool bracketed = absl::StartsWith(host, "[") && absl::EndsWith(host, "]");
    if (host.empty() || (!bracketed && absl::StrContains(host, ':'))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--health-probe '", spec, "': expected [HOST:]PORT (an IPv6 host in brackets)"));
    }
  }
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--health-probe '", spec, "': port '", port_text, "' is not in 1..65535"));
  }
  return absl::StrCat(host, ":", port);
}

int RunHealthProbe(absl::string_view spec, const std::string& tls_cert_file,
                   const std::string& ca_file, const std::string& token_file) {
  auto probe = [&]() -> absl::Status {
    HealthProbeOptions o;
    TG_ASSIGN_OR_RETURN(o.target, ProbeTarget(spec));
    if (!tls_cert_file.empty()) {
      TG_ASSIGN_OR_RETURN(o.pinned_cert_pem, ReadFlagFile(tls_cert_file, "--tls-cert"));
    }
    if (!ca_file.empty()) {
      TG_ASSIGN_OR_RETURN(o.ca_pem, ReadFlagFile(ca_file, "--peer-tls-ca"));
    }
    if (!token_file.empty()) {
      TG_ASSIGN_OR_RETURN(std::string token, ReadFlagFile(token_file, "--auth-token-file"));
      o.token = std::string(absl::StripAsciiWhitespace(token));
    }
    TG_RETURN_IF_ERROR(ProbeHealth(o));
    kServerLog.Info("health probe: SERVING", {{"target", o.target}});
    return absl::OkStatus();
  };
  if (absl::Status s = probe(); !s.ok()) {
    kServerLog.Error(absl::StrCat("health probe: ", s.message()));
    return 1;
  }
  return 0;
}

HealthProbeOptions ProbeOptionsFor(const ServerConfig& config, int port) {
  HealthProbeOptions o;
  o.target = JoinHostPort(LocalDialHost(config.host), port);
  o.pinned_cert_pem = config.tls_cert_pem;
  o.token = config.auth_token;
  return o;
}

// grpc.health.v1 whose answer is the main port's: a Check probes the main port unless an
// answer for the same service is younger than kHealthAnswerTtl, and one probe runs at a time
// (checks meanwhile wait for its answer), so checks cannot make the server dial itself more
// than about once a second per service, however many arrive.
class HealthPort::Service final : public health::Health::Service {
 public:
  explicit Service(HealthProbeOptions main) : main_(std::move(main)) {}

  grpc::Status Check(grpc::ServerContext* context, const health::HealthCheckRequest* request,
                     health::HealthCheckResponse* response) override {
    const absl::Time deadline = absl::FromChrono(context->deadline()) - kForwardMargin;
    absl::Status s;
    if (!Answer(request->service(), deadline, &s)) {
      response->set_status(health::HealthCheckResponse::NOT_SERVING);  // no answer in time.
      return grpc::Status::OK;
    }
    if (absl::IsNotFound(s)) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
    response->set_status(s.ok() ? health::HealthCheckResponse::SERVING
                                : health::HealthCheckResponse::NOT_SERVING);
    return grpc::Status::OK;
  }

  uint64_t probes() const { return probes_.load(); }

 private:
  struct Cached {
    absl::Time at;
    absl::Status status;
  };

  // The main port's answer for `service` in *status: a recent one, else a probe's (within
  // `deadline`). False when the deadline passed while another check's probe ran.
  bool Answer(const std::string& service, absl::Time deadline, absl::Status* status) {
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (auto it = cache_.find(service);
            it != cache_.end() && absl::Now() - it->second.at < kHealthAnswerTtl) {
          *status = it->second.status;
          return true;
        }
        if (!probing_) break;
        if (!mu_.AwaitWithDeadline(absl::Condition(this, &Service::NotProbing), deadline)) {
          return false;
        }
      }
      probing_ = true;
    }
    HealthProbeOptions o = main_;
    o.service = service;
    o.timeout = std::min(main_.timeout, deadline - absl::Now());
    ++probes_;
    *status = ProbeHealth(o);
    absl::MutexLock lock(&mu_);
    // Service names come from the network: keep a few.
    if (cache_.size() >= kMaxCachedServices) cache_.clear();
    cache_[service] = {absl::Now(), *status};
    probing_ = false;
    return true;
  }
  bool NotProbing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !probing_; }

  const HealthProbeOptions main_;
  absl::Mutex mu_;
  bool probing_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, Cached> cache_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> probes_{0};
};

HealthPort::HealthPort() = default;

HealthPort::~HealthPort() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
}

uint64_t HealthPort::probes() const { return service_->probes(); }

absl::StatusOr<std::unique_ptr<HealthPort>> HealthPort::Start(absl::string_view host, int port,
                                                              HealthProbeOptions main) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--health-port ", port, " is not in 0..65535"));
  }
  std::unique_ptr<HealthPort> p(new HealthPort());
  p->service_ = std::make_unique<Service>(std::move(main));
  grpc::ServerBuilder builder;
  // Our grpc.health.v1 instead of gRPC's default one (enabled process-wide by RpcServer).
  builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  builder.SetOption(std::make_unique<NoPluginsOption>());
  builder.AddListeningPort(JoinHostPort(host, port), grpc::InsecureServerCredentials(), &p->port_);
  builder.RegisterService(p->service_.get());
  p->server_ = builder.BuildAndStart();
  if (p->server_ == nullptr || p->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("--health-port: cannot listen on ", JoinHostPort(host, port)));
  }
  return p;
}

}  // namespace tg::server
