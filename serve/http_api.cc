#include "serve/http_api.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "serve/exchange.h"
#include "serve/tls_server.h"

namespace tg::serve {
namespace {

constexpr char kJson[] = "application/json";
// The listen queue. Debian's cpp-httplib is a shared library built with a backlog of 5, and
// the kernel reset most of 64 clients that connected at the same moment (a burst of users, a
// load balancer's reconnects) before the server accepted them; llama-server listens with 128.
// listen() on a listening socket sets its backlog anew (the kernel caps it at somaxconn).
constexpr int kListenBacklog = 1024;
// How often a stream checks that its client is still there while no token comes.
constexpr absl::Duration kStreamPoll = absl::Milliseconds(100);

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

// A finished request's usage (and times) for its response.
Usage UsageOf(const Exchange::Taken& t, int64_t n_prompt) {
  return {n_prompt, t.completion_tokens, t.cached_tokens, t.prompt_ms, t.predicted_ms};
}

}  // namespace

HttpApi::HttpApi(const HttpOptions& options, std::unique_ptr<httplib::Server> server)
    : options_(options),
      server_(std::move(server)),
      first_token_latency_(std::make_shared<LatencyHistogram>(
          "tg_server_time_to_first_token_seconds",
          "Seconds from a completion request's arrival to its first generated token.")),
      token_latency_(std::make_shared<LatencyHistogram>(
          "tg_server_time_per_output_token_seconds",
          "Seconds between successive generated tokens of a request.")) {}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(const HttpOptions& options) {
  if (options.ssl_cert_file.empty() != options.ssl_key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS wants both --ssl-cert and --ssl-key; ",
                     options.ssl_cert_file.empty() ? "--ssl-cert" : "--ssl-key", " is missing"));
  }
  std::unique_ptr<httplib::Server> server;
  if (options.ssl_cert_file.empty()) {
    server = std::make_unique<httplib::Server>();
  } else {
    absl::StatusOr<std::unique_ptr<httplib::Server>> tls =
        MakeTlsServer(options.ssl_cert_file, options.ssl_key_file);
    if (!tls.ok()) return tls.status();
    server = std::move(*tls);
  }
  std::unique_ptr<HttpApi> api(new HttpApi(options, std::move(server)));
  httplib::Server& s = *api->server_;
  const int threads = options.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(options.max_body_bytes);
  api->Routes();
  int listening = -1;  // the socket the bind below made (the last one tried).
  s.set_socket_options([&listening](socket_t sock) {
    httplib::default_socket_options(sock);
    listening = sock;
  });
  api->port_ = options.port == 0 ? s.bind_to_any_port(options.host)
                                 : (s.bind_to_port(options.host, options.port) ? options.port : -1);
  s.set_socket_options(httplib::default_socket_options);
  if (api->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.host, ":", options.port));
  }
  if (::listen(listening, kListenBacklog) != 0) {
    return absl::InternalError(absl::StrCat("listen(backlog ", kListenBacklog, ") on ",
                                            options.host, ":", api->port_, " failed"));
  }
  api->thread_ = std::thread([api = api.get()] {
    api->server_->listen_after_bind();
    api->listener_done_ = true;
  });
  return api;
}

HttpApi::~HttpApi() {
  if (!thread_.joinable()) return;
  // httplib's stop() does nothing until listen has begun (it marks the server running in
  // there), so a server destroyed right after Start would leave its listener in accept():
  // wait for the listener to run (or to have given up) before stopping it, once.
  while (!server_->is_running() && !listener_done_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->stop();
  thread_.join();
}

void HttpApi::SetEngine(Engine* engine, ChatRenderer chat) {
  chat_ = std::move(chat);
  const Tokenizer& tok = engine->tokenizer();
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.IsEog(id)) stop_tokens_.push_back(id);
  }
  engine_.store(engine);
}

void HttpApi::Count(int status) {
  absl::MutexLock lock(&mu_);
  ++requests_by_status_[status];
}

void HttpApi::Error(httplib::Response& res, int status, const std::string& message) {
  const char* type = status == 401   ? "authentication_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  res.status = status;
  res.set_content(Dump(ErrorBody(message, type, status)), kJson);
  Count(status);
}

bool HttpApi::Authorized(const httplib::Request& req, httplib::Response& res) {
  if (options_.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == absl::StrCat("Bearer ", options_.api_key)) {
    return true;
  }
  Error(res, 401, "a valid API key is required (Authorization: Bearer KEY)");
  return false;
}

void HttpApi::Routes() {
  httplib::Server& s = *server_;
  s.set_exception_handler([this](const httplib::Request&, httplib::Response& res,
                                 std::exception_ptr) { Error(res, 500, "internal error"); });
  s.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (res.status == 413) Error(res, 413, "the request body is too large");
    if (res.status == 404 && res.body.empty()) Error(res, 404, "no such route");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = engine_.load() != nullptr;
    res.status = ready ? 200 : 503;
    res.set_content(Dump(Json{{"status", ready ? "ok" : "loading model"}}), kJson);
  });
  s.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) res.set_content(Metrics(), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    const Json model = {{"id", options_.model_name},
                        {"object", "model"},
                        {"created", Now()},
                        {"owned_by", "tensorgrid"}};
    res.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({model})}}), kJson);
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Complete(req, res, /*chat=*/false);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Complete(req, res, /*chat=*/true);
  });
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    Engine* engine = ReadyEngine(req, res);
    if (engine == nullptr) return;
    absl::StatusOr<Json> parsed = ParseBody(req.body);
    if (!parsed.ok()) return Error(res, 400, std::string(parsed.status().message()));
    const Json& body = *parsed;
    if (!body.is_object() || !body.contains("content") || !body["content"].is_string()) {
      return Error(res, 400, "'content' must be a string");
    }
    const absl::StatusOr<bool> add_special = OptionalBool(body, "add_special", false);
    const absl::StatusOr<bool> parse_special = OptionalBool(body, "parse_special", false);
    for (const absl::Status& s : {add_special.status(), parse_special.status()}) {
      if (!s.ok()) return Error(res, 400, std::string(s.message()));
    }
    const std::vector<int32_t> ids = engine->tokenizer().Encode(
        body["content"].get<std::string>(), *add_special, *parse_special);
    res.set_content(Dump(Json{{"tokens", ids}}), kJson);
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    Engine* engine = ReadyEngine(req, res);
    if (engine == nullptr) return;
    absl::StatusOr<Json> parsed = ParseBody(req.body);
    if (!parsed.ok()) return Error(res, 400, std::string(parsed.status().message()));
    const Json& body = *parsed;
    const Tokenizer& tok = engine->tokenizer();
    const std::string bad = absl::StrCat("'tokens' must be token ids in [0, ", tok.n_vocab(), ")");
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
      return Error(res, 400, bad);
    }
    std::string text;
    for (const Json& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab()) {
        return Error(res, 400, bad);
      }
      text += tok.TokenToPiece(t.get<int32_t>());
    }
    res.set_content(Dump(Json{{"content", text}}), kJson);
  });
  s.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    if (ReadyEngine(req, res) == nullptr) return;
    absl::StatusOr<Json> parsed = ParseBody(req.body);
    if (!parsed.ok()) return Error(res, 400, std::string(parsed.status().message()));
    const Json& body = *parsed;
    if (!body.is_object() || !body.contains("messages") || !body["messages"].is_array()) {
      return Error(res, 400, "'messages' must be an array");
    }
    if (!chat_) return Error(res, 400, "the model has no chat template (--chat-template NAME)");
    const absl::StatusOr<bool> add_generation = OptionalBool(body, "add_generation_prompt", true);
    if (!add_generation.ok())
      return Error(res, 400, std::string(add_generation.status().message()));
    absl::StatusOr<std::string> prompt = chat_(body["messages"], *add_generation);
    if (!prompt.ok()) return Error(res, 400, std::string(prompt.status().message()));
    res.set_content(Dump(Json{{"prompt", *prompt}}), kJson);
  });
}

Engine* HttpApi::ReadyEngine(const httplib::Request& req, httplib::Response& res) {
  if (!Authorized(req, res)) return nullptr;
  Engine* engine = engine_.load();
  if (engine == nullptr) {
    res.set_header("Retry-After", "5");
    Error(res, 503, "the model is still loading");
  }
  return engine;
}

void HttpApi::Complete(const httplib::Request& req, httplib::Response& res, bool chat) {
  const auto arrival = std::chrono::steady_clock::now();
  Engine* engine = ReadyEngine(req, res);
  if (engine == nullptr) return;
  absl::StatusOr<Json> parsed = ParseBody(req.body);
  if (!parsed.ok()) return Error(res, 400, std::string(parsed.status().message()));
  const Json& body = *parsed;
  absl::StatusOr<CompletionParams> p = ParseCompletion(body, chat, engine->n_ctx());
  if (!p.ok()) return Error(res, 400, std::string(p.status().message()));
  if (const Json* m = body.contains("model") ? &body["model"] : nullptr;
      m != nullptr && m->is_string() && !m->get<std::string>().empty() &&
      m->get<std::string>() != options_.model_name) {
    return Error(res, 404,
                 absl::StrCat("the model '", m->get<std::string>(),
                              "' does not exist (this server serves '", options_.model_name, "')"));
  }
  std::string text = p->prompt;
  const Tokenizer& tok = engine->tokenizer();
  if (chat) {
    if (!chat_) return Error(res, 400, "the model has no chat template (--chat-template NAME)");
    absl::StatusOr<std::string> rendered = chat_(p->messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return Error(res, 400, std::string(rendered.status().message()));
    text = *rendered;
  }
  // A rendered chat prompt that starts with BOS's text has its BOS already.
  const bool add_special =
      !chat || tok.bos() < 0 || !absl::StartsWith(text, tok.TokenToPiece(tok.bos()));
  // A chat template writes its control tokens as text ("<|im_start|>"): they are tokens.
  std::vector<int32_t> prompt = tok.Encode(text, add_special, /*parse_special=*/chat);
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (chat && !body.contains("max_tokens") && !body.contains("max_completion_tokens")) {
    p->max_tokens = engine->n_ctx() - n_prompt;
  }
  if (prompt.empty() || p->max_tokens < 1 || n_prompt + p->max_tokens > engine->n_ctx()) {
    return Error(res, 400,
                 absl::StrFormat("the prompt's %d tokens and max_tokens %d exceed the context of "
                                 "%d tokens (shorten the prompt, lower max_tokens, or raise -c)",
                                 n_prompt, p->max_tokens, engine->n_ctx()));
  }
  auto exchange = std::make_shared<Exchange>(
      tok, p->stop, p->max_tokens, TokenLatencies{arrival, first_token_latency_, token_latency_},
      static_cast<int>(p->logprobs));
  absl::StatusOr<int> id = engine->Submit(exchange->Request(prompt, stop_tokens_, p->sampling));
  if (!id.ok()) {
    res.set_header("Retry-After", "1");
    return Error(res, HttpStatusOf(id.status()), std::string(id.status().message()));
  }
  prompt_tokens_ += n_prompt;
  const std::string rid = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", next_id_++, "-", Now());
  const int64_t created = Now();
  const CompletionParams params = *p;
  if (!params.stream) {
    std::string out;
    std::vector<LogprobEntry> logprobs;
    Exchange::Taken t;
    while (!t.done) {
      t = exchange->Take(absl::Seconds(1));
      out += t.text;
      logprobs.insert(logprobs.end(), std::make_move_iterator(t.logprobs.begin()),
                      std::make_move_iterator(t.logprobs.end()));
    }
    generated_tokens_ += t.completion_tokens;
    cached_tokens_ += t.cached_tokens;
    if (!t.status.ok()) return Error(res, HttpStatusOf(t.status), std::string(t.status.message()));
    res.set_content(Dump(CompletionResponse(params, rid, created, options_.model_name, out,
                                            t.finish_reason, UsageOf(t, n_prompt), logprobs)),
                    kJson);
    return Count(200);
  }
  Count(200);
  const std::string model = options_.model_name;
  // The completion's bytes sent so far: the next chunk's first text_offset.
  auto sent = std::make_shared<int64_t>(0);
  res.set_chunked_content_provider(
      "text/event-stream", [this, exchange, engine, id = *id, params, rid, created, model,
                            n_prompt, sent](size_t, httplib::DataSink& sink) {
        auto send = [&](const Json& j) {
          const std::string event = absl::StrCat("data: ", Dump(j), "\n\n");
          return sink.write(event.data(), event.size());
        };
        const Exchange::Taken t = exchange->Take(kStreamPoll);
        const bool any = !t.text.empty() || !t.logprobs.empty();
        if ((any && !send(StreamChunk(params, rid, created, model, t.text, {}, t.logprobs,
                                      *sent))) ||
            !sink.is_writable()) {
          exchange->Abandon();  // the client is gone: its slot frees at the next step.
          engine->Cancel(id);
          return false;
        }
        *sent += static_cast<int64_t>(t.text.size());
        if (!t.done) return true;
        generated_tokens_ += t.completion_tokens;
        cached_tokens_ += t.cached_tokens;
        if (!t.status.ok()) {
          send(ErrorBody(std::string(t.status.message()), "server_error", 500));
        } else {
          const Usage usage = UsageOf(t, n_prompt);
          Json last = StreamChunk(params, rid, created, model, "", t.finish_reason);
          AddTimings(usage, &last);
          send(last);
          if (params.include_usage) {
            send(UsageChunk(params, rid, created, model, usage));
          }
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      });
}

std::string HttpApi::Metrics() const {
  std::string out;
  {
    absl::MutexLock lock(&mu_);
    absl::StrAppend(&out, "# TYPE tg_server_requests_total counter\n");
    for (const auto& [status, n] : requests_by_status_) {
      absl::StrAppend(&out, "tg_server_requests_total{status=\"", status, "\"} ", n, "\n");
    }
  }
  absl::StrAppend(&out, "# TYPE tg_server_prompt_tokens_total counter\n",
                  "tg_server_prompt_tokens_total ", prompt_tokens_.load(), "\n",
                  "# TYPE tg_server_generated_tokens_total counter\n",
                  "tg_server_generated_tokens_total ", generated_tokens_.load(), "\n",
                  "# TYPE tg_server_prompt_tokens_cached_total counter\n",
                  "tg_server_prompt_tokens_cached_total ", cached_tokens_.load(), "\n");
  if (Engine* e = engine_.load(); e != nullptr) {
    absl::StrAppend(&out, "# TYPE tg_server_queued gauge\ntg_server_queued ", e->queued(), "\n",
                    "# TYPE tg_server_running gauge\ntg_server_running ", e->running(), "\n",
                    "# TYPE tg_server_kv_cells_used gauge\ntg_server_kv_cells_used ",
                    e->cells_used(), "\n",
                    "# TYPE tg_server_kv_cells_cached gauge\ntg_server_kv_cells_cached ",
                    e->cells_cached(), "\n",
                    "# TYPE tg_server_failovers_total counter\ntg_server_failovers_total ",
                    e->failovers(), "\n");
  }
  first_token_latency_->AppendTo(&out);
  token_latency_->AppendTo(&out);
  return out;
}

}  // namespace tg::serve
