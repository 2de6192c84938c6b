// libFuzzer entry point for rpc-server's Session: the input is a sequence of length-prefixed
// (u32 little-endian) serialized SessionRequest messages, fed to one in-process Session on
// the CPU devices with a 16 MiB memory limit, which is then destroyed. Any input must leave
// the process intact and, once the session is gone, no buffer held. Built as a libFuzzer
// binary (clang, TG_FUZZ=ON: rpc_session_fuzz) or linked into rpc_session_fuzz_replay.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backends/register_builtin.h"
#include "core/registry.h"
#include "google/protobuf/stubs/logging.h"
#include "server/grant_table.h"
#include "server/metrics.h"
#include "server/session.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace {

constexpr uint64_t kMemLimit = uint64_t{16} << 20;
constexpr int kMaxRequests = 64;

struct Env {
  tg::server::Metrics metrics;
  tg::server::GrantTable grants;
  tg::server::SessionEnv session_env;
  bool verbose = false;

  Env() {
    // Invalid UTF-8 in string fields is logged by protobuf on every parse: keep it quiet.
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    verbose = std::getenv("TG_FUZZ_VERBOSE") != nullptr;
    setenv("TG_CPU_DEVICES", "2", 0);
    if (!tg::RegisterBuiltinBackends().ok()) std::abort();
    for (tg::Device* d : tg::Registry::Get().devices()) {
      if (d->type() != tg::DeviceType::kCpu) continue;
      // One thread per stream: sessions come and go thousands of times.
      if (!d->SetThreads(1).ok()) std::abort();
      session_env.devices.push_back(d);
    }
    session_env.mem_limit = kMemLimit;
    session_env.metrics = &metrics;
    session_env.grants = &grants;
    session_env.peers = nullptr;  // never reach out to the network while fuzzing.
    session_env.predictable_handles = true;
  }
};

Env& GetEnv() {
  static Env* env = new Env();
  return *env;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Env& env = GetEnv();
  {
    tg::server::Session session("fuzz", env.session_env);
    tensorgrid::v1::SessionRequest request;
    size_t pos = 0;
    for (int n = 0; n < kMaxRequests && size - pos >= 4; ++n) {
      uint32_t len;
      std::memcpy(&len, data + pos, 4);
      pos += 4;
      if (len > size - pos) break;
      if (request.ParseFromArray(data + pos, static_cast<int>(len))) {
        // Every command gets one reply, in order; a batch's come grouped.
        int answered = 0;
        session.Serve(request, [&](const tensorgrid::v1::SessionReply& reply) {
          if (reply.id() != request.id()) std::abort();
          if (!request.has_batch()) {
            ++answered;
          } else {
            if (!reply.has_batch()) std::abort();
            for (const tensorgrid::v1::SessionReply& r : reply.batch().replies()) {
              if (answered >= request.batch().commands_size() ||
                  r.id() != request.batch().commands(answered).id()) {
                std::abort();
              }
              ++answered;
            }
          }
          if (env.verbose) {
            std::fprintf(stderr, "request %llu (command %d): code %d %s\n",
                         static_cast<unsigned long long>(request.id()), request.command_case(),
                         reply.code(), reply.message().c_str());
          }
          return true;
        });
        if (answered != (request.has_batch() ? request.batch().commands_size() : 1)) std::abort();
        if (session.bytes_held() > kMemLimit) std::abort();  // the quota held.
      }
      pos += len;
    }
  }
  // The session is gone: everything it allocated must be too.
  if (env.metrics.buffers() != 0 || env.metrics.buffer_bytes() != 0) std::abort();
  if (env.grants.size() != 0) std::abort();
  return 0;
}
