// rpc-server: exposes this machine's devices over the tensorgrid.v1 gRPC protocol.
//   rpc-server [-H 127.0.0.1] [-p 50052] [-d 0,1] [-c DIR] [--tls-cert F --tls-key F]
//              [--auth-token-file F] [--metrics-port N] [--model-dir DIR]... (see --help)
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "backends/register_builtin.h"
#include "cli/arg_parser.h"
#include "cli/device_pick.h"
#include "cli/flag_file.h"
#include "core/deadlock_detection.h"
#include "core/registry.h"
#include "core/status_macros.h"
#include "proto/protocol.h"
#include "server/byte_size.h"
#include "server/health_probe.h"
#include "server/log.h"
#include "server/memory_reservation.h"
#include "server/metrics.h"
#include "server/rpc_server.h"
#include "server/service.h"

namespace tg::server {
namespace {

// Exit codes: a bad command line (unknown flag, missing or unparsable value, stray argument)
// is 2, like the other tools; everything after the flags are parsed (a bad combination, an
// unreadable file, a port that cannot be bound) is 1.
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

struct Flags {
  std::string host = "127.0.0.1";
  int64_t port = rpc::kDefaultPort;
  std::string devices;
  std::string device;  // llama.cpp's spelling of the same list.
  int64_t threads = 0;
  std::string cache_dir;
  float cache_max_gb = 0;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string auth_token_file;
  std::string client_tokens_file;
  std::string client_mem_limit = "0";
  int64_t client_max_sessions = 0;
  bool insecure = false;
  std::string peer_tls_ca;
  std::string peer_tls_cert;
  std::string peer_tls_key;
  std::string peers;  // empty: PeerAllowList::Default().
  int64_t metrics_port = 0;
  std::string metrics_host = "127.0.0.1";
  std::string metrics_token_file;
  std::string health_host = "127.0.0.1";
  bool reflection = false;
  int64_t max_sessions = 64;
  std::string session_mem_limit = "auto";
  std::string mem_reserve = "auto";
  std::string mem_budget = "auto";
  int64_t max_buffers_per_session = static_cast<int64_t>(kDefaultMaxBuffersPerSession);
  int64_t stream_idle_timeout = 30;  // seconds.
  std::string peer_link_port = "0";  // a port, 0 for a free one, or "off".
  std::string port_file;
  std::string log_level = "info";
  std::string health_probe;
  int64_t health_port = 0;
  std::vector<std::string> model_dirs;
};

// The parser keeps one value per flag; --model-dir may be given several times, so its
// occurrences are taken out of the arguments first (as --model-dir DIR or --model-dir=DIR).
std::vector<char*> TakeRepeated(int argc, char** argv, absl::string_view flag,
                                std::vector<std::string>* values, bool* missing_value) {
  std::vector<char*> rest;
  const std::string with_eq = absl::StrCat(flag, "=");
  for (int i = 0; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (i > 0 && arg == flag) {
      if (i + 1 >= argc) {
        *missing_value = true;
        break;
      }
      values->emplace_back(argv[++i]);
    } else if (i > 0 && absl::StartsWith(arg, with_eq)) {
      values->emplace_back(arg.substr(with_eq.size()));
    } else {
      rest.push_back(argv[i]);
    }
  }
  return rest;
}

// -d/--devices (or --device): indices into the registry's device list or device names;
// default: all GPUs, else all CPU devices. Only local devices: the registry holds no remote
// ones in a server.
absl::StatusOr<std::vector<Device*>> PickServedDevices(const Flags& f) {
  if (!f.devices.empty() && !f.device.empty()) {
    return absl::InvalidArgumentError("give -d/--devices or --device, not both");
  }
  const bool named = f.devices.empty() && !f.device.empty();
  return PickDevices(named ? f.device : f.devices, named ? "--device" : "--devices",
                     DefaultDevices::kLocalGpusElseCpus);
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot write --port-file ", path));
  }
  return absl::OkStatus();
}

// A byte size flag whose "auto" means `automatic`.
absl::StatusOr<uint64_t> ByteSizeOrAuto(const std::string& text, const char* flag,
                                        uint64_t automatic) {
  if (text == "auto") return automatic;
  absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", bytes.status().message()));
  }
  return *bytes;
}

// What the served devices keep their buffers in: host memory (CPU devices share it: counted
// once), and the other devices' own memory.
struct ServedMemory {
  bool host = false;
  uint64_t device_bytes = 0;
};
ServedMemory MemoryServed(const std::vector<Device*>& devices) {
  ServedMemory m;
  for (Device* d : devices) {
    if (d->default_buffer_type()->is_host()) {
      m.host = true;
    } else {
      m.device_bytes += d->memory().total;
    }
  }
  return m;
}

// --session-mem-limit auto: from the host's memory (or its container's limit) above the
// reserve when a served device keeps its buffers there, plus the other devices' own.
uint64_t AutoSessionMemLimit(const std::vector<Device*>& devices, uint64_t reserve) {
  const ServedMemory m = MemoryServed(devices);
  return DefaultSessionMemLimit(HostMemoryTotal(), m.host, reserve, m.device_bytes);
}

// --mem-budget auto: all of that, for all sessions together.
uint64_t AutoServerMemBudget(const std::vector<Device*>& devices, uint64_t reserve) {
  const ServedMemory m = MemoryServed(devices);
  return DefaultServerMemoryBudget(HostMemoryTotal(), m.host, reserve, m.device_bytes);
}

// --peers and --peer-tls-*: where PeerPull may connect, and how.
absl::Status ReadPeerOptions(const Flags& f, PeerClientOptions& peer) {
  if (!f.peers.empty()) {
    TG_ASSIGN_OR_RETURN(peer.allowed, PeerAllowList::Parse(f.peers));
  }
  if (f.peer_tls_cert.empty() != f.peer_tls_key.empty()) {
    return absl::InvalidArgumentError("--peer-tls-cert and --peer-tls-key go together");
  }
  if (!f.peer_tls_cert.empty() && f.peer_tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--peer-tls-cert needs --peer-tls-ca (a client certificate is only sent over TLS)");
  }
  if (!f.peer_tls_ca.empty()) {
    TG_ASSIGN_OR_RETURN(peer.tls.ca_pem, ReadFlagFile(f.peer_tls_ca, "--peer-tls-ca"));
  }
  if (!f.peer_tls_cert.empty()) {
    TG_ASSIGN_OR_RETURN(peer.tls.cert_pem, ReadFlagFile(f.peer_tls_cert, "--peer-tls-cert"));
    TG_ASSIGN_OR_RETURN(peer.tls.key_pem, ReadFlagFile(f.peer_tls_key, "--peer-tls-key"));
  }
  return absl::OkStatus();
}

// The server's configuration, and the host memory reserve (process-wide: see
// memory_reservation.h) in *host_reserve.
absl::StatusOr<ServerConfig> MakeConfig(const Flags& f, uint64_t* host_reserve) {
  ServerConfig c;
  c.host = f.host;
  if (f.port < 0 || f.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port ", f.port, " is not in 0..65535"));
  }
  c.port = static_cast<int>(f.port);
  if (f.max_sessions < 1 || f.max_sessions > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-sessions ", f.max_sessions, " is not in 1..100000"));
  }
  c.max_sessions = static_cast<int>(f.max_sessions);
  if (f.metrics_port < 0 || f.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-port ", f.metrics_port, " is not in 0..65535"));
  }
  if (f.metrics_port > 0) c.metrics_port = static_cast<int>(f.metrics_port);
  c.metrics_host = f.metrics_host;
  if (!f.metrics_token_file.empty()) {
    TG_ASSIGN_OR_RETURN(std::string token,
                        ReadFlagFile(f.metrics_token_file, "--metrics-token-file"));
    c.metrics_token = std::string(absl::StripAsciiWhitespace(token));
    if (c.metrics_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-token-file ", f.metrics_token_file, " is empty"));
    }
  }
  c.reflection = f.reflection;
  if (f.cache_max_gb < 0) return absl::InvalidArgumentError("--cache-max-gb must be >= 0");
  c.cache_dir = f.cache_dir;
  c.model_dirs = f.model_dirs;
  c.cache_max_bytes = static_cast<uint64_t>(static_cast<double>(f.cache_max_gb) * (1ull << 30));
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!f.tls_client_ca.empty() && f.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (!f.tls_cert.empty()) {
    TG_ASSIGN_OR_RETURN(c.tls_cert_pem, ReadFlagFile(f.tls_cert, "--tls-cert"));
    TG_ASSIGN_OR_RETURN(c.tls_key_pem, ReadFlagFile(f.tls_key, "--tls-key"));
  }
  if (!f.tls_client_ca.empty()) {
    TG_ASSIGN_OR_RETURN(c.tls_client_ca_pem, ReadFlagFile(f.tls_client_ca, "--tls-client-ca"));
  }
  TG_RETURN_IF_ERROR(ReadPeerOptions(f, c.peer));
  if (!f.auth_token_file.empty()) {
    TG_ASSIGN_OR_RETURN(std::string token, ReadFlagFile(f.auth_token_file, "--auth-token-file"));
    c.auth_token = std::string(absl::StripAsciiWhitespace(token));
    if (c.auth_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth-token-file ", f.auth_token_file, " is empty"));
    }
  }
  if (!f.client_tokens_file.empty()) {
    TG_ASSIGN_OR_RETURN(std::string text, ReadFlagFile(f.client_tokens_file, "--client-tokens"));
    TG_ASSIGN_OR_RETURN(c.client_tokens,
                        ParseClientTokens(text, f.client_tokens_file, c.auth_token));
    if (c.client_tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--client-tokens ", f.client_tokens_file, " names no client"));
    }
  }
  TG_ASSIGN_OR_RETURN(c.client_mem_limit,
                      ByteSizeOrAuto(f.client_mem_limit, "--client-mem-limit", /*automatic=*/0));
  if (f.client_max_sessions < 0 || f.client_max_sessions > f.max_sessions) {
    return absl::InvalidArgumentError(absl::StrCat("--client-max-sessions ", f.client_max_sessions,
                                                   " is not in 0..--max-sessions (", f.max_sessions,
                                                   ")"));
  }
  c.client_max_sessions = static_cast<int>(f.client_max_sessions);
  if (!IsLoopbackHost(c.host) && !f.insecure && (c.tls_cert_pem.empty() || c.auth_token.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("refusing to listen on ", c.host,
                     " without TLS and a token (--tls-cert/--tls-key and --auth-token-file); "
                     "add --insecure to do it anyway"));
  }
  // --log-level debug also says why CUDA is absent on a host without an NVIDIA driver.
  TG_RETURN_IF_ERROR(RegisterBuiltinBackends(LogEnabled(LogLevel::kDebug)));
  TG_ASSIGN_OR_RETURN(c.devices, PickServedDevices(f));
  TG_ASSIGN_OR_RETURN(*host_reserve, ByteSizeOrAuto(f.mem_reserve, "--mem-reserve",
                                                    DefaultHostMemoryReserve(HostMemoryTotal())));
  TG_ASSIGN_OR_RETURN(c.session_mem_limit,
                      ByteSizeOrAuto(f.session_mem_limit, "--session-mem-limit",
                                     AutoSessionMemLimit(c.devices, *host_reserve)));
  TG_ASSIGN_OR_RETURN(c.mem_budget, ByteSizeOrAuto(f.mem_budget, "--mem-budget",
                                                   AutoServerMemBudget(c.devices, *host_reserve)));
  if (f.max_buffers_per_session < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-buffers-per-session ", f.max_buffers_per_session, " is negative"));
  }
  c.max_buffers_per_session = static_cast<uint64_t>(f.max_buffers_per_session);
  if (f.stream_idle_timeout < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stream-idle-timeout ", f.stream_idle_timeout, " is negative"));
  }
  c.stream_idle_timeout = absl::Seconds(f.stream_idle_timeout);
  if (f.peer_link_port == "off") {
    c.peer_link_port.reset();
  } else {
    int port = -1;
    if (!absl::SimpleAtoi(f.peer_link_port, &port) || port < 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("--peer-link-port ", f.peer_link_port,
                                                     ": want a port (0 for a free one) or off"));
    }
    c.peer_link_port = port;
  }
  if (f.threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (f.threads > 0) SetThreads(c.devices, f.threads);
  return c;
}

// "rpc-server: listening on ADDRESS" and what is served, the line people wait for.
void LogListening(const ServerConfig& config, RpcServer& server) {
  std::vector<std::string> names;
  for (Device* d : config.devices) names.emplace_back(d->name());
  const char* tls = config.tls_cert_pem.empty()        ? "off"
                    : config.tls_client_ca_pem.empty() ? "tls"
                                                       : "mtls";
  kServerLog.Info(
      absl::StrCat("listening on ", server.address()),
      {{"devices", absl::StrJoin(names, ",")},
       {"cache", config.cache_dir.empty() ? "off" : config.cache_dir},
       {"tls", tls},
       {"token", config.auth_token.empty() ? "off" : "on"},
       {"peers", config.peer.allowed.ToString()},
       {"peer_tls", config.peer.tls.ca_pem.empty()     ? "off"
                    : config.peer.tls.cert_pem.empty() ? "tls"
                                                       : "mtls"},
       {"metrics_port",
        config.metrics_port.has_value() ? absl::StrCat(server.metrics().exposer_port()) : "off"},
       {"max_sessions", config.max_sessions},
       {"session_mem_limit", config.session_mem_limit},
       {"mem_reserve", HostMemoryReserve()},
       {"mem_budget", config.mem_budget},
       {"max_buffers_per_session", config.max_buffers_per_session},
       // Late, so that the fields before it keep their places for whoever parses the line;
       // newer fields after it.
       {"model_dir", config.model_dirs.empty() ? "off" : absl::StrJoin(config.model_dirs, ",")},
       {"metrics_host", config.metrics_port.has_value() ? config.metrics_host : "off"},
       {"metrics_token", config.metrics_token.empty() ? "off" : "on"},
       {"reflection", config.reflection ? "on" : "off"},
       {"client_tokens", config.client_tokens.size()},
       {"client_mem_limit", config.client_mem_limit},
       {"client_max_sessions", config.client_max_sessions},
       {"peer_link_port", server.service().links().port() != 0
                              ? absl::StrCat(server.service().links().port())
                              : std::string("off")}});
}

int Main(int argc, char** argv) {
  BoundHostHeap();
  if (absl::Status s = ConfigureDeadlockDetection(); !s.ok()) {
    kServerLog.Error(s.message());
    return kExitRuntime;
  }
  Flags f;
  ArgParser p("rpc-server");
  p.AddString("-H", "--host", &f.host, "address to bind (default 127.0.0.1)");
  p.AddInt("-p", "--port", &f.port, "port (default 50052; 0 = any free port)");
  p.AddString("-d", "--devices", &f.devices,
              "local devices to serve, indices or names: 0,1 or CPU0,CPU1 "
              "(default: all GPUs, else the CPU devices)");
  p.AddString(nullptr, "--device", &f.device, "the same as --devices (llama.cpp's name)");
  p.AddInt("-t", "--threads", &f.threads, "CPU threads per CPU device (default: all)");
  p.AddString("-c", "--cache", &f.cache_dir, "weight cache directory (default: none)");
  p.AddFloat(nullptr, "--cache-max-gb", &f.cache_max_gb, "cache size limit in GiB (0 = none)");
  p.AddString(nullptr, "--tls-cert", &f.tls_cert, "server certificate (PEM) for TLS");
  p.AddString(nullptr, "--tls-key", &f.tls_key, "server private key (PEM) for TLS");
  p.AddString(nullptr, "--tls-client-ca", &f.tls_client_ca,
              "CA (PEM) that client certificates must chain to (mTLS)");
  p.AddString(nullptr, "--auth-token-file", &f.auth_token_file,
              "file holding the bearer token clients must send");
  // A client is the name of the token it sends from --client-tokens, else its IP address.
  p.AddString(nullptr, "--client-tokens", &f.client_tokens_file, "'NAME TOKEN' lines: tenants");
  p.AddString(nullptr, "--client-mem-limit", &f.client_mem_limit, "memory per client (0 = none)");
  p.AddInt(nullptr, "--client-max-sessions", &f.client_max_sessions, "per client (0 = no cap)");
  p.AddBool(nullptr, "--insecure", &f.insecure,
            "allow a non-loopback address without TLS and a token");
  p.AddString(nullptr, "--peer-tls-ca", &f.peer_tls_ca,
              "CA (PEM) to verify other servers with for peer copies (default: plaintext)");
  p.AddString(nullptr, "--peer-tls-cert", &f.peer_tls_cert,
              "client certificate (PEM) shown to peers that require mTLS (with --peer-tls-ca)");
  p.AddString(nullptr, "--peer-tls-key", &f.peer_tls_key, "its private key (PEM)");
  p.AddString(nullptr, "--peers", &f.peers,
              "servers this one exchanges data with (it dials only these, and takes peer "
              "calls only from them): hosts, host:port, CIDR ranges, comma-separated, or none "
              "(default: loopback only; a cluster names its hosts or CIDR ranges)");
  p.AddInt(nullptr, "--metrics-port", &f.metrics_port,
           "serve Prometheus /metrics on this port (0 = off)");
  p.AddString(nullptr, "--metrics-host", &f.metrics_host,
              "address /metrics binds (default 127.0.0.1, whatever -H is)");
  p.AddString(nullptr, "--metrics-token-file", &f.metrics_token_file,
              "file holding a token /metrics then requires as 'Authorization: Bearer <token>' "
              "(else 401)");
  p.AddBool(nullptr, "--reflection", &f.reflection,
            "serve gRPC server reflection (lists the methods to anyone who connects; off by "
            "default)");
  p.AddInt(nullptr, "--max-sessions", &f.max_sessions, "most concurrent sessions (default 64)");
  p.AddString(nullptr, "--session-mem-limit", &f.session_mem_limit,
              "memory per session, e.g. 512M, 4G; 0 = no limit (default auto: half of the "
              "host memory above --mem-reserve, plus half of each GPU's)");
  p.AddString(nullptr, "--mem-reserve", &f.mem_reserve,
              "host memory no allocation may take, left to the OS and other processes; "
              "0 = none (default auto: a tenth of the host's, within 1G..8G). The host's "
              "memory is its container's limit where that is less");
  p.AddString(nullptr, "--mem-budget", &f.mem_budget,
              "memory all sessions may hold together, e.g. 512M, 4G; 0 = no budget (default "
              "auto: the host's (or container's) memory less --mem-reserve, plus each GPU's)");
  p.AddInt(nullptr, "--max-buffers-per-session", &f.max_buffers_per_session,
           "most buffers one session may hold at once; 0 = no cap (default 65536)");
  p.AddInt(nullptr, "--stream-idle-timeout", &f.stream_idle_timeout,
           "seconds an Upload or Download may make no progress before it is cancelled and "
           "its buffer let go; 0 = never (default 30)");
  p.AddString(nullptr, "--peer-link-port", &f.peer_link_port,
              "port (on -H) where peer servers open links for small all-reduce pieces, 0 = any "
              "free port, off = none (default 0; plaintext, so none with --tls-cert)");
  p.AddString(nullptr, "--port-file", &f.port_file, "write the bound port to this file");
  p.AddString(nullptr, "--log-level", &f.log_level,
              "least severe log lines written: error, warn, info or debug (default info)");
  p.AddString(nullptr, "--health-probe", &f.health_probe,
              "[HOST:]PORT: ask that server's grpc.health.v1 and exit 0 when SERVING (with "
              "--tls-cert to pin its certificate or --peer-tls-ca, and --auth-token-file)");
  p.AddInt(nullptr, "--health-port", &f.health_port,
           "also serve grpc.health.v1 in plaintext on this port, for probes without TLS "
           "(0 = off)");
  p.AddString(nullptr, "--health-host", &f.health_host,
              "address the --health-port binds (default 127.0.0.1, whatever -H is)");
  std::string model_dir_help;  // --model-dir is taken out before parsing; listed for --help.
  p.AddString(nullptr, "--model-dir", &model_dir_help,
              "serve weights from the GGUF files under this directory (read-only; repeatable): "
              "clients loading the same model send no weight bytes");
  bool model_dir_missing = false;
  std::vector<char*> args =
      TakeRepeated(argc, argv, "--model-dir", &f.model_dirs, &model_dir_missing);
  if (model_dir_missing) {
    kServerLog.Error("--model-dir needs a value");
    return kExitUsage;
  }
  if (absl::Status s = p.Parse(static_cast<int>(args.size()), args.data()); !s.ok()) {
    kServerLog.Error(s.message());
    return kExitUsage;
  }
  if (p.help_requested()) {
    std::printf("%s", p.Usage("[options]").c_str());
    return 0;
  }
  if (!p.positional().empty()) {
    kServerLog.Error(absl::StrCat("unexpected argument '", p.positional()[0], "'"));
    return kExitUsage;
  }
  absl::StatusOr<LogLevel> level = ParseLogLevel(f.log_level);
  if (!level.ok()) {
    kServerLog.Error(absl::StrCat("--log-level: ", level.status().message()));
    return kExitUsage;
  }
  SetLogLevel(*level);
  if (!f.health_probe.empty()) {
    return RunHealthProbe(f.health_probe, f.tls_cert, f.peer_tls_ca, f.auth_token_file);
  }
  uint64_t host_reserve = 0;
  absl::StatusOr<ServerConfig> config = MakeConfig(f, &host_reserve);
  if (!config.ok()) {
    kServerLog.Error(config.status().message());
    return kExitRuntime;
  }
  SetHostMemoryReserve(host_reserve);
  // Signals go to the thread waiting below, not to gRPC's threads (which inherit the mask).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<RpcServer>> server = RpcServer::Start(*config);
  if (!server.ok()) {
    kServerLog.Error(server.status().message());
    return kExitRuntime;
  }
  if (!f.port_file.empty()) {
    if (absl::Status s = WritePortFile(f.port_file, (*server)->port()); !s.ok()) {
      kServerLog.Error(s.message());
      return kExitRuntime;
    }
  }
  std::unique_ptr<HealthPort> health_port;
  if (f.health_port != 0) {
    absl::StatusOr<std::unique_ptr<HealthPort>> hp =
        HealthPort::Start(f.health_host, static_cast<int>(f.health_port),
                          ProbeOptionsFor(*config, (*server)->port()));
    if (!hp.ok()) {
      kServerLog.Error(hp.status().message());
      return kExitRuntime;
    }
    health_port = std::move(*hp);
    kServerLog.Info("health port listening", {{"port", health_port->port()}});
  }
  LogListening(*config, **server);
  int sig = 0;
  sigwait(&signals, &sig);
  kServerLog.Info("shutting down", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  health_port.reset();
  (*server)->Shutdown(2000);
  server->reset();
  return 0;
}

}  // namespace
}  // namespace tg::server

int main(int argc, char** argv) { return tg::server::Main(argc, argv); }
