#include "server/metrics.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "proto/content_hash.h"
#include "server/host_port.h"

namespace tg::server {
namespace {

prometheus::Gauge* NewGauge(prometheus::Registry& r, const char* name, const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

prometheus::Counter* NewCounter(prometheus::Registry& r, const char* name, const char* help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

// The addresses of the listener bound to host:port, as this machine dials them; nullptr when
// they cannot be resolved. Free with freeaddrinfo.
addrinfo* ListenerAddresses(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string dial = LocalDialHost(host);
  if (getaddrinfo(dial.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return nullptr;
  return found;
}

// Opens and closes a TCP connection to the first of `addresses` that accepts one. Best
// effort: failures are ignored.
void TouchListener(const addrinfo* addresses) {
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
    if (connected) break;
  }
}

// Bearer tokens of the exposers that need one, by listening port: civetweb's begin_request
// callback is a plain function that sees the connection, not the Metrics that started it.
struct ExposerTokens {
  absl::Mutex mu;
  absl::flat_hash_map<int, rpc::Sha256Digest> by_port ABSL_GUARDED_BY(mu);
};
ExposerTokens& Tokens() {
  static ExposerTokens* tokens = new ExposerTokens();  // never destroyed: exposers may outlive.
  return *tokens;
}

// civetweb's begin_request for an exposer with a token: 0 lets the request through, else it
// answers 401. A port not (yet) in the table is refused: it fails closed.
int CheckBearerToken(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  std::optional<rpc::Sha256Digest> want;
  if (info != nullptr) {
    ExposerTokens& tokens = Tokens();
    absl::MutexLock lock(&tokens.mu);
    if (auto it = tokens.by_port.find(info->server_port); it != tokens.by_port.end()) {
      want = it->second;
    }
  }
  const char* header = mg_get_header(conn, "Authorization");
  constexpr absl::string_view kBearer = "Bearer ";
  if (want.has_value() && header != nullptr && absl::StartsWith(header, kBearer)) {
    const absl::string_view token = absl::string_view(header).substr(kBearer.size());
    const rpc::Sha256Digest got = rpc::Sha256(token.data(), token.size());
    if (CRYPTO_memcmp(got.data(), want->data(), got.size()) == 0) return 0;
  }
  static constexpr char kBody[] =
      "401 Unauthorized: send 'Authorization: Bearer <token>' (rpc-server --metrics-token-file)\n";
  mg_printf(conn,
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"metrics\"\r\n"
            "Content-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
            sizeof(kBody) - 1, kBody);
  return 401;
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  sessions_active_ = NewGauge(r, "tg_sessions_active", "Session streams open now.");
  buffers_ = NewGauge(r, "tg_buffers", "Buffers held by all sessions.");
  buffer_bytes_ = NewGauge(r, "tg_buffer_bytes", "Bytes of the buffers held by all sessions.");
  cache_bytes_ = NewGauge(r, "tg_cache_bytes", "Bytes in the blob cache (--cache).");
  mem_budget_ = NewGauge(r, "tg_mem_budget_bytes",
                         "Server memory budget all sessions share (--mem-budget; 0 = none).");
  mem_held_ =
      NewGauge(r, "tg_mem_held_bytes", "Bytes all sessions hold against the server memory budget.");
  sessions_total_ = NewCounter(r, "tg_sessions_total", "Sessions started.");
  upload_bytes_ = NewCounter(r, "tg_upload_bytes_total", "Bytes received over Upload.");
  cache_hit_bytes_ =
      NewCounter(r, "tg_cache_hit_bytes_total", "Upload bytes served from the blob cache.");
  download_bytes_ = NewCounter(r, "tg_download_bytes_total", "Bytes sent over Download.");
  compute_total_ = NewCounter(r, "tg_compute_total", "Graphs computed.");
  peer_copy_bytes_ =
      NewCounter(r, "tg_peer_copy_bytes_total", "Bytes sent to other servers over PeerCopy.");
  peer_mailbox_bytes_ = NewGauge(r, "tg_peer_mailbox_bytes",
                                 "Bytes peers delivered that wait in a mailbox for a session.");
  model_file_bytes_ = NewCounter(r, "tg_model_file_bytes_total",
                                 "Upload bytes read from --model-dir files instead.");
  model_dir_files_ = NewGauge(r, "tg_model_dir_files", "Files indexed under --model-dir.");
  upload_seconds_ =
      NewCounter(r, "tg_upload_seconds_total",
                 "Wall seconds during which at least one Upload or FillPieces call was open.");
  auto& calls = prometheus::BuildCounter()
                    .Name("tg_upload_calls_total")
                    .Help("Upload streams (a piece each) and FillPieces calls (many) served.")
                    .Register(r);
  upload_calls_ = &calls.Add({{"call", "upload"}});
  fill_calls_ = &calls.Add({{"call", "fill_pieces"}});
  requests_ = &prometheus::BuildCounter()
                   .Name("tg_requests_total")
                   .Help("Session commands answered, by status code.")
                   .Register(r);
}

Metrics::~Metrics() { StopExposer(); }

void Metrics::StopExposer() {
  if (exposer_ == nullptr) return;
  // civetweb's listening thread polls its socket in rounds of 2 s and sees the stop request
  // only between rounds, so every server shutdown waited up to 2 s for it. A connection ends
  // the round at once: keep connecting until the exposer is gone.
  addrinfo* const listener = ListenerAddresses(exposer_host_, exposer_port_);
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (!stopped.load(std::memory_order_acquire)) {
      TouchListener(listener);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer_.reset();
  stopped.store(true, std::memory_order_release);
  waker.join();
  if (listener != nullptr) freeaddrinfo(listener);
  if (exposer_token_) {
    ExposerTokens& tokens = Tokens();
    absl::MutexLock lock(&tokens.mu);
    tokens.by_port.erase(exposer_port_);
    exposer_token_ = false;
  }
  exposer_port_ = 0;
}

absl::Status Metrics::StartExposer(const std::string& host, int port, const std::string& token) {
  // Debian's civetweb, which prometheus-cpp serves with, is built without IPv6: a wildcard
  // host (:: included) is served on every IPv4 address, and an IPv6 host cannot be.
  const std::string bind_host = IsWildcardHost(host) ? "0.0.0.0" : host;
  const std::string address = JoinHostPort(bind_host, port);
  // civetweb copies the callbacks when it starts.
  static const CivetCallbacks* const kWithToken = [] {
    auto* callbacks = new CivetCallbacks();
    callbacks->begin_request = CheckBearerToken;
    return callbacks;
  }();
  const std::vector<std::string> options = {
      "listening_ports",    address,
      "num_threads",        absl::StrCat(kExposerThreads),
      "request_timeout_ms", absl::StrCat(absl::ToInt64Milliseconds(kExposerRequestTimeout)),
      "enable_keep_alive",  "no"};
  try {  // prometheus-cpp (civetweb) reports a failed bind by throwing.
    exposer_ = std::make_unique<prometheus::Exposer>(options, token.empty() ? nullptr : kWithToken);
    exposer_->RegisterCollectable(registry_);
    const std::vector<int> ports = exposer_->GetListeningPorts();
    exposer_port_ = ports.empty() ? port : ports.front();
    exposer_host_ = bind_host;
    if (!token.empty()) {
      ExposerTokens& tokens = Tokens();
      absl::MutexLock lock(&tokens.mu);
      tokens.by_port[exposer_port_] = rpc::Sha256(token.data(), token.size());
      exposer_token_ = true;
    }
  } catch (const std::exception& e) {
    exposer_.reset();
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", address, ": ", e.what(),
        absl::StrContains(bind_host, ':')
            ? " (the metrics server has no IPv6 support: bind to an IPv4 address or to ::, "
              "which serves metrics on every IPv4 address)"
            : ""));
  }
  return absl::OkStatus();
}

void Metrics::SessionOpened() {
  sessions_active_->Increment();
  sessions_total_->Increment();
}
void Metrics::SessionClosed() { sessions_active_->Decrement(); }
void Metrics::BufferAllocated(uint64_t bytes) {
  buffers_->Increment();
  buffer_bytes_->Increment(static_cast<double>(bytes));
}
void Metrics::BufferFreed(uint64_t bytes) {
  buffers_->Decrement();
  buffer_bytes_->Decrement(static_cast<double>(bytes));
}
void Metrics::SetMemBudget(uint64_t bytes) { mem_budget_->Set(static_cast<double>(bytes)); }
void Metrics::MemHeldChanged(double delta_bytes) {
  if (delta_bytes >= 0) {
    mem_held_->Increment(delta_bytes);
  } else {
    mem_held_->Decrement(-delta_bytes);
  }
}

void Metrics::Request(int code) {
  prometheus::Counter* c;
  {
    absl::MutexLock lock(&mu_);
    auto it = requests_by_code_.find(code);
    if (it == requests_by_code_.end()) {
      const std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
      c = &requests_->Add({{"code", name.empty() ? absl::StrCat(code) : name}});
      requests_by_code_[code] = c;
    } else {
      c = it->second;
    }
  }
  c->Increment();
}

void Metrics::UploadBytes(uint64_t bytes) { upload_bytes_->Increment(static_cast<double>(bytes)); }
void Metrics::CacheHitBytes(uint64_t bytes) {
  cache_hit_bytes_->Increment(static_cast<double>(bytes));
}
void Metrics::DownloadBytes(uint64_t bytes) {
  download_bytes_->Increment(static_cast<double>(bytes));
}
void Metrics::ComputeRun() { compute_total_->Increment(); }
void Metrics::PeerCopyBytes(uint64_t bytes) {
  peer_copy_bytes_->Increment(static_cast<double>(bytes));
}
void Metrics::PeerMailboxBytes(double delta_bytes) {
  if (delta_bytes >= 0) {
    peer_mailbox_bytes_->Increment(delta_bytes);
  } else {
    peer_mailbox_bytes_->Decrement(-delta_bytes);
  }
}
double Metrics::peer_mailbox_bytes() const { return peer_mailbox_bytes_->Value(); }
void Metrics::SetCacheBytes(uint64_t bytes) { cache_bytes_->Set(static_cast<double>(bytes)); }

void Metrics::ModelFileBytes(uint64_t bytes) {
  model_file_bytes_->Increment(static_cast<double>(bytes));
}
void Metrics::SetModelDirFiles(uint64_t files) {
  model_dir_files_->Set(static_cast<double>(files));
}

void Metrics::UploadStarted(UploadCall call) {
  Calls(call)->Increment();
  absl::MutexLock lock(&mu_);
  if (uploads_open_++ == 0) uploads_since_ = absl::Now();
}

void Metrics::UploadFinished() {
  absl::MutexLock lock(&mu_);
  if (--uploads_open_ == 0) {
    upload_seconds_->Increment(absl::ToDoubleSeconds(absl::Now() - uploads_since_));
  }
}

double Metrics::sessions_active() const { return sessions_active_->Value(); }
double Metrics::buffers() const { return buffers_->Value(); }
double Metrics::buffer_bytes() const { return buffer_bytes_->Value(); }
double Metrics::mem_held_bytes() const { return mem_held_->Value(); }
double Metrics::upload_bytes() const { return upload_bytes_->Value(); }
double Metrics::cache_hit_bytes() const { return cache_hit_bytes_->Value(); }
double Metrics::model_file_bytes() const { return model_file_bytes_->Value(); }
double Metrics::upload_seconds() const { return upload_seconds_->Value(); }
double Metrics::upload_calls(UploadCall call) const { return Calls(call)->Value(); }

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace tg::server
