// tg-server: serves a GGUF model (on any devices and splits tg-run takes, remote ones
// included) over an OpenAI-compatible HTTP API (serve/http_api.h); requests decode together
// on one KV cache (continuous batching). Listens first, so /health says "loading" while the
// weights load; stops on SIGINT/SIGTERM. With --rpc-failover, a lost rpc-server of the plan
// does not end the running requests: the model is loaded again on the devices left and they
// go on (serve/engine.h), one stderr line telling each recovery.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/arg_parser.h"
#include "cli/flag_file.h"
#include "cli/rpc/device_flags.h"
#include "core/deadlock_detection.h"
#include "core/status_macros.h"
#include "models/failover_model.h"
#include "models/llama_model.h"
#include "serve/chat_template/chat_template.h"
#include "serve/engine.h"
#include "serve/http_api.h"
#include "tools/common/failover.h"
#include "tools/common/weight_loading.h"

namespace tg {
namespace {

struct ServerFlags {
  std::string model;
  DeviceFlags devices;
  int64_t ctx = 4096;
  int64_t batch = 512;
  std::string kv_type = "f16";
  std::string mmap = "auto";  // --mmap: ParseWeightMapping.
  std::string host = "127.0.0.1";
  int64_t port = 8080;
  std::string port_file;
  int64_t parallel = 8;
  bool no_cache_prompt = false;  // every prompt decoded whole; nothing kept after a request.
  bool rpc_failover = false;     // go on without a lost rpc-server.
  std::string api_key_file;
  std::string ssl_cert;  // PEM files: both, HTTPS only; neither, HTTP.
  std::string ssl_key;
  std::string chat_template;       // a built-in by name.
  std::string chat_template_file;  // a Jinja file.
  bool verbose = false;
};

absl::StatusOr<std::string> ReadKey(const std::string& path) {
  if (path.empty()) return std::string();
  TG_ASSIGN_OR_RETURN(const std::string file, ReadFlagFile(path, "--api-key-file"));
  std::string key(absl::StripAsciiWhitespace(file));
  if (key.empty())
    return absl::InvalidArgumentError(absl::StrCat("--api-key-file '", path, "' is empty"));
  return key;
}

// The chat template: --chat-template-file, else --chat-template NAME, else the model's
// tokenizer.chat_template; nullptr when there is none. A template with a construct the engine
// lacks fails here, naming it and its line.
absl::StatusOr<serve::ChatRenderer> ChatRendererFor(const ServerFlags& f, const LlamaModel& model) {
  std::string source;
  std::string origin;
  if (!f.chat_template_file.empty()) {
    TG_ASSIGN_OR_RETURN(source, ReadFlagFile(f.chat_template_file, "--chat-template-file"));
    origin = f.chat_template_file;
  } else if (!f.chat_template.empty()) {
    TG_ASSIGN_OR_RETURN(source, chat_template::ChatTemplate::BuiltinSource(f.chat_template));
    origin = absl::StrCat("--chat-template ", f.chat_template);
  } else if (absl::StatusOr<std::string> own = model.file().GetString("tokenizer.chat_template");
             own.ok()) {
    source = *own;
    origin = "the model's tokenizer.chat_template";
  } else {
    return serve::ChatRenderer();
  }
  absl::StatusOr<std::unique_ptr<chat_template::ChatTemplate>> parsed =
      chat_template::ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", parsed.status().message(),
                                                   " (--chat-template NAME picks a built-in)"));
  }
  std::shared_ptr<const chat_template::ChatTemplate> tmpl = std::move(*parsed);
  const Tokenizer& tok = model.tokenizer();
  const std::string bos = tok.bos() >= 0 ? tok.TokenToPiece(tok.bos()) : "";
  const std::string eos = tok.eos() >= 0 ? tok.TokenToPiece(tok.eos()) : "";
  return serve::ChatRenderer([tmpl, bos, eos](const serve::Json& messages, bool add_generation) {
    const serve::Json context = {{"messages", messages},
                                 {"add_generation_prompt", add_generation},
                                 {"bos_token", bos},
                                 {"eos_token", eos}};
    return tmpl->Render(context);
  });
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::Status Serve(const ServerFlags& f) {
  serve::HttpOptions ho;
  ho.host = f.host;
  ho.port = static_cast<int>(f.port);
  ho.model_name = BaseName(f.model);
  TG_ASSIGN_OR_RETURN(ho.api_key, ReadKey(f.api_key_file));
  ho.ssl_cert_file = f.ssl_cert;
  ho.ssl_key_file = f.ssl_key;
  // A TLS write to a client that has gone raises SIGPIPE (OpenSSL writes with write(), not
  // send(MSG_NOSIGNAL) as cpp-httplib's plain sockets do); ignored, the write's error ends the
  // stream. (gRPC's start-up ignores it too; this does not rely on that.)
  signal(SIGPIPE, SIG_IGN);
  // Signals go to the thread that waits below, not to the server's threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  TG_ASSIGN_OR_RETURN(std::unique_ptr<serve::HttpApi> api, serve::HttpApi::Start(ho));
  if (!f.port_file.empty()) {
    std::ofstream(f.port_file) << api->port() << "\n";
  }
  std::fprintf(stderr, "tg-server: listening on %s://%s:%d; loading %s\n",
               api->tls() ? "https" : "http", f.host.c_str(), api->port(), f.model.c_str());
  DeviceFlags device_flags = f.devices;
  device_flags.verbose = f.verbose;
  TG_ASSIGN_OR_RETURN(DevicePlan plan, ResolveDevicePlan(device_flags));
  LoadOptions lo;
  lo.plan = plan;
  TG_ASSIGN_OR_RETURN(lo.mapping, ParseWeightMapping(f.mmap));
  // Outlives the model: a failover loads again, into the same report.
  LoadReport load;
  lo.progress = LoadProgressBar("tg-server");
  lo.loaded = FillLoadReport(&load);
  // Declared before the engine, so destroyed after it: the engine's thread uses it to the end.
  TG_ASSIGN_OR_RETURN(std::unique_ptr<FailoverModel> failover,
                      FailoverModel::Load(f.model, lo, f.rpc_failover));
  // The model as loaded, for what is read once here (chat template, description); the engine
  // reads failover->model() anew after each recovery.
  const LlamaModel* model = &failover->model();
  if (f.verbose) std::fputs(FormatLoadReport(load, "tg-server").c_str(), stderr);
  serve::EngineOptions eo;
  eo.session.n_ctx = f.ctx;
  eo.session.n_batch = f.batch;
  TG_ASSIGN_OR_RETURN(eo.session.kv_type, ParseDType(f.kv_type));
  eo.max_running = f.parallel;
  eo.reuse_prompts = !f.no_cache_prompt;
  TG_ASSIGN_OR_RETURN(serve::ChatRenderer chat, ChatRendererFor(f, *model));
  auto report = [](const serve::EngineFailover& e) {
    std::fprintf(stderr, "%s, %lld requests continue\n",
                 RecoveryLine("tg-server", absl::StrFormat("at step %d", e.step), e.event).c_str(),
                 static_cast<long long>(e.requests));
  };
  const std::string described = model->Describe();
  TG_ASSIGN_OR_RETURN(std::unique_ptr<serve::Engine> engine,
                      serve::Engine::Create(*failover, eo, report));
  model = nullptr;  // from here on, a recovery may replace it.
  api->SetEngine(engine.get(), chat);
  std::fprintf(stderr, "tg-server: ready: %s | %d sequences at once, %lld cells%s\n",
               described.c_str(), static_cast<int>(f.parallel), static_cast<long long>(f.ctx),
               f.rpc_failover ? " | --rpc-failover" : "");
  int signal = 0;
  sigwait(&signals, &signal);
  std::fprintf(stderr, "tg-server: shutting down (%s)\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
  api.reset();  // no new requests; then the engine ends the running ones.
  return absl::OkStatus();
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  if (absl::Status s = tg::ConfigureDeadlockDetection(); !s.ok()) {
    std::fprintf(stderr, "tg-server: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  tg::ServerFlags f;
  tg::ArgParser p("tg-server");
  p.AddString("-m", "--model", &f.model, "GGUF model to serve");
  tg::AddDeviceFlags(p, &f.devices);
  p.AddInt("-c", "--ctx-size", &f.ctx, "KV cache cells shared by every request (default 4096)");
  p.AddInt("-b", "--batch-size", &f.batch, "most tokens decoded in one step (default 512)");
  p.AddString(nullptr, "--kv-type", &f.kv_type, "KV cache type: f16 (default) or f32");
  p.AddString(nullptr, "--mmap", &f.mmap, tg::kMmapHelp);
  p.AddString(nullptr, "--host", &f.host, "address to listen on (default 127.0.0.1)");
  p.AddInt(nullptr, "--port", &f.port, "port (default 8080; 0: any free one)");
  p.AddString(nullptr, "--port-file", &f.port_file, "write the bound port to this file");
  p.AddBool(nullptr, "--no-cache-prompt", &f.no_cache_prompt,
            "keep no finished request's KV cache for later prompts that start like it (by "
            "default the longest shared prefix is reused, idle entries freed when needed)");
  p.AddInt("-np", "--parallel", &f.parallel, "requests decoded at once (default 8)");
  p.AddBool(nullptr, "--rpc-failover", &f.rpc_failover,
            "when an rpc-server is lost, go on with the remaining devices (the same split, -ts "
            "renormalised); running requests resume where they were");
  p.AddString(nullptr, "--api-key-file", &f.api_key_file,
              "file holding the API key clients must send as 'Authorization: Bearer KEY'");
  p.AddString(nullptr, "--ssl-cert", &f.ssl_cert,
              "PEM certificate (then its chain) to serve HTTPS only with; needs --ssl-key");
  p.AddString(nullptr, "--ssl-key", &f.ssl_key,
              "PEM private key of --ssl-cert (unencrypted); needs --ssl-cert");
  const std::string template_help =
      absl::StrCat("built-in chat template instead of the model's: ",
                   absl::StrJoin(tg::chat_template::ChatTemplate::BuiltinNames(), ", "));
  p.AddString(nullptr, "--chat-template", &f.chat_template, template_help.c_str());
  p.AddString(nullptr, "--chat-template-file", &f.chat_template_file,
              "Jinja chat template file instead of the model's tokenizer.chat_template");
  p.AddBool("-v", "--verbose", &f.verbose, "say how the weights were loaded");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "tg-server: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (p.help_requested()) {
    std::printf("%s", p.Usage("-m MODEL.gguf [--host H] [--port P] [--parallel N] [-c CELLS]\n"
                              "                 [-sm none|layer|tensor] [--rpc host:port,...]\n"
                              "                 [--ssl-cert CERT.pem --ssl-key KEY.pem] [options]")
                          .c_str());
    return 0;
  }
  if (!p.positional().empty()) {
    std::fprintf(stderr, "tg-server: unexpected argument '%s'\n", p.positional()[0].c_str());
    return 2;
  }
  if (f.ssl_cert.empty() != f.ssl_key.empty()) {
    std::fprintf(stderr, "tg-server: %s is missing (HTTPS takes both --ssl-cert and --ssl-key)\n",
                 f.ssl_cert.empty() ? "--ssl-cert" : "--ssl-key");
    return 2;
  }
  if (f.model.empty() || f.parallel < 1 || f.parallel > tg::KvCells::kMaxSequences || f.port < 0 ||
      f.port > 65535 || f.ctx < 1 || f.batch < 1) {
    std::fprintf(stderr,
                 "tg-server: -m MODEL is required; --parallel in [1, %d]; --port in [0, 65535]; "
                 "-c and -b positive (see tg-server --help)\n",
                 tg::KvCells::kMaxSequences);
    return 2;
  }
  if (absl::Status s = tg::Serve(f); !s.ok()) {
    std::fprintf(stderr, "tg-server: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
