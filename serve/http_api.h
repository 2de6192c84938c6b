// HttpApi: tg-server's HTTP front (cpp-httplib): OpenAI-compatible GET /v1/models, POST
// /v1/completions and /v1/chat/completions (whole, or streamed as server-sent events ending
// in `data: [DONE]`), and llama-server's GET /health (503 until the model is loaded), GET
// /metrics (Prometheus text), POST /tokenize, /detokenize and /apply-template. Requests go to
// the Engine, which decodes them together; errors are OpenAI-style JSON (400 bad request,
// 401 without the API key, 413 too large a body, 503 with Retry-After when the queue is
// full). With a certificate and key it serves HTTPS only (cpp-httplib's SSLServer, TLS 1.2+).
// /metrics also carries two latency histograms: time to first token and time per output
// token, and the prompt tokens reused from the engine's cache (also each response's
// usage.prompt_tokens_details.cached_tokens), and tg_server_failovers_total (the engine's
// --rpc-failover recoveries). Text is made with the engine's tokenizer, never its model's,
// which a recovery replaces. Thread-safe: handlers run on the server's own thread pool.
#ifndef TENSORGRID_SERVE_HTTP_API_H_
#define TENSORGRID_SERVE_HTTP_API_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "serve/engine.h"
#include "serve/latency_histogram.h"
#include "serve/openai_api.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace tg::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;         // 0: any free port (port() says which).
  std::string api_key;     // non-empty: every route but /health wants it as a Bearer token.
  std::string model_name;  // what /v1/models lists and responses name.
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413.
  int threads = 64;                  // concurrent requests served (streams hold one each).
  // TLS: paths of PEM files, both or neither. Both: HTTPS only, with this certificate (the
  // server's first, then any intermediates) and its private key (unencrypted, matching the
  // certificate); Start fails naming the file that cannot be read, parsed or matched.
  // Neither: plain HTTP.
  std::string ssl_cert_file;
  std::string ssl_key_file;
};

// Renders chat messages into a prompt (the model's chat template); nullptr: no template.
using ChatRenderer =
    std::function<absl::StatusOr<std::string>(const Json& messages, bool add_generation_prompt)>;

class HttpApi {
 public:
  // Binds and serves on a thread of its own; /health answers 503 until SetEngine.
  // INVALID_ARGUMENT for TLS files that cannot be used (naming the file and why),
  // UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(const HttpOptions& options);
  ~HttpApi();  // stops serving and joins.

  // The model is loaded: requests go to `engine` (which must outlive this), chat through
  // `chat`.
  void SetEngine(Engine* engine, ChatRenderer chat);
  int port() const { return port_; }
  bool tls() const { return !options_.ssl_cert_file.empty(); }

 private:
  HttpApi(const HttpOptions& options, std::unique_ptr<httplib::Server> server);
  void Routes();
  void Complete(const httplib::Request& req, httplib::Response& res, bool chat);
  bool Authorized(const httplib::Request& req, httplib::Response& res);
  // The engine once the request is authorized and the model loaded; else nullptr, after
  // answering 401 or 503 (Retry-After).
  Engine* ReadyEngine(const httplib::Request& req, httplib::Response& res);
  void Error(httplib::Response& res, int status, const std::string& message);
  std::string Metrics() const;
  void Count(int status);

  const HttpOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listener_done_{false};  // thread_'s listen has returned.
  int port_ = 0;
  std::atomic<Engine*> engine_{nullptr};
  ChatRenderer chat_;                 // set once with the engine, before requests can reach it.
  std::vector<int32_t> stop_tokens_;  // the model's end-of-generation ids.
  std::atomic<int64_t> next_id_{0};
  // cached_tokens_: prompt tokens the engine took from its cache (a request's once it ends).
  std::atomic<int64_t> prompt_tokens_{0}, generated_tokens_{0}, cached_tokens_{0};
  // Shared with the requests' exchanges, which the engine may outlive this with.
  const std::shared_ptr<LatencyHistogram> first_token_latency_, token_latency_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, int64_t> requests_by_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_HTTP_API_H_
