// rpc_bench: the RPC service's fixed costs on loopback, in one process and one run:
//   - round trip of an empty Session command (the floor under every decode step);
//   - Upload MB/s (tensorgrid's path: copy, parallel streams, optional SHA-256) against a
//     plain gRPC byte stream served by the same server on the same port;
//   - a cache hit: bytes the server already holds, answered without sending them.
// Usage: rpc_bench [--mb 256] [--round-trips 2000]
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "backends/register_builtin.h"
#include "bench/rpc/byte_sink.grpc.pb.h"
#include "client/connection.h"
#include "core/registry.h"
#include "proto/protocol.h"
#include "server/service.h"

namespace {

namespace pb = tensorgrid::v1;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class SinkService final : public tensorgrid::bench::ByteSink::Service {
  grpc::Status Sink(grpc::ServerContext*, grpc::ServerReader<tensorgrid::bench::Chunk>* reader,
                    tensorgrid::bench::Received* reply) override {
    tensorgrid::bench::Chunk chunk;
    uint64_t n = 0;
    while (reader->Read(&chunk)) n += chunk.data().size();
    reply->set_bytes(n);
    return grpc::Status::OK;
  }
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "rpc_bench: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mb = 256, round_trips = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mb") == 0) (void)absl::SimpleAtoi(argv[i + 1], &mb);
    if (std::strcmp(argv[i], "--round-trips") == 0)
      (void)absl::SimpleAtoi(argv[i + 1], &round_trips);
  }
  if (absl::Status s = tg::RegisterBuiltinBackends(); !s.ok()) return Fail(s);
  tg::server::ServiceOptions options;
  options.devices = {tg::Registry::Get().CpuDevice()};
  tg::server::TensorGridService service(options);
  SinkService sink;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(tg::rpc::kMaxMessageBytes));
  builder.SetMaxSendMessageSize(static_cast<int>(tg::rpc::kMaxMessageBytes));
  builder.RegisterService(&service);
  builder.RegisterService(&sink);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);

  tg::rpc::ClientOptions client_options;
  client_options.progress = false;
  auto connection = tg::rpc::Connection::Open(endpoint, client_options);
  if (!connection.ok()) return Fail(connection.status());
  tg::rpc::Connection& c = **connection;

  // 1. Round trip of an empty command.
  for (int i = 0; i < 100; ++i) {
    pb::SessionRequest r;
    r.mutable_cache_stats();
    if (auto s = c.Call(r); !s.ok()) return Fail(s.status());
  }
  auto t0 = Clock::now();
  for (int64_t i = 0; i < round_trips; ++i) {
    pb::SessionRequest r;
    r.mutable_cache_stats();
    if (auto s = c.Call(r); !s.ok()) return Fail(s.status());
  }
  const double rt_us = Seconds(t0, Clock::now()) / round_trips * 1e6;
  std::printf("session round trip: %.1f us (%lld calls)\n", rt_us,
              static_cast<long long>(round_trips));

  // 2. Upload throughput.
  const size_t piece = size_t{16} << 20;
  const size_t total = static_cast<size_t>(mb) << 20;
  std::string bytes(piece, '\0');
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&bytes[i], &v, 8);
  }
  pb::SessionRequest alloc;
  alloc.mutable_alloc_buffer()->set_device(0);
  alloc.mutable_alloc_buffer()->set_size(total);
  auto buffer = c.Call(alloc);
  if (!buffer.ok()) return Fail(buffer.status());
  const uint64_t handle = buffer->alloc_buffer().buffer();

  auto upload = [&](bool cacheable, uint64_t salt) -> absl::StatusOr<double> {
    const auto start = Clock::now();
    for (size_t off = 0; off < total; off += piece) {
      std::memcpy(&bytes[0], &salt, 8);  // distinct content per run: no accidental cache hits.
      std::memcpy(&bytes[8], &off, 8);
      if (auto s = c.Upload(handle, off, bytes.data(), piece, cacheable); !s.ok()) return s;
    }
    if (auto s = c.WaitUploads(); !s.ok()) return s;
    return total / 1e6 / Seconds(start, Clock::now());
  };
  auto raw = [&](int streams) -> double {
    auto stub = tensorgrid::bench::ByteSink::NewStub(
        grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < streams; ++t) {
      threads.emplace_back([&, t] {
        grpc::ClientContext ctx;
        tensorgrid::bench::Received got;
        auto w = stub->Sink(&ctx, &got);
        tensorgrid::bench::Chunk chunk;
        for (size_t off = t * tg::rpc::kChunkBytes; off < total;
             off += streams * tg::rpc::kChunkBytes) {
          chunk.set_data(bytes.data() + (off % piece), tg::rpc::kChunkBytes);
          w->Write(chunk);
        }
        w->WritesDone();
        w->Finish();
      });
    }
    for (auto& th : threads) th.join();
    return total / 1e6 / Seconds(start, Clock::now());
  };
  auto plain = upload(false, 1);
  if (!plain.ok()) return Fail(plain.status());
  auto hashed = upload(true, 2);
  if (!hashed.ok()) return Fail(hashed.status());
  const double raw1 = raw(1), raw4 = raw(4);
  std::printf(
      "upload %lld MiB: tensorgrid %.0f MB/s (no hash), %.0f MB/s (SHA-256, cacheable); "
      "plain gRPC stream %.0f MB/s (1 stream), %.0f MB/s (4 streams)\n",
      static_cast<long long>(mb), *plain, *hashed, raw1, raw4);
  std::printf("ratio tensorgrid/plain: %.2f (no hash), %.2f (SHA-256)\n",
              *plain / std::max(raw1, raw4), *hashed / std::max(raw1, raw4));
  server->Shutdown();
  return 0;
}
