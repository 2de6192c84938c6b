// rpc_bench: the RPC service's fixed costs on loopback, in one process and one run:
//   - round trip of an empty Session command (the floor under every decode step);
//   - Upload MB/s (the model loader's path: pieces of borrowed memory, no client copy,
//     parallel streams; into touched and fresh server memory; with a verified SHA-256)
//     against a plain gRPC byte stream served by the same server on the same port;
// Usage: rpc_bench [--mb 256] [--round-trips 2000] [--streams 4 (the client's Upload streams)]
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
#include "proto/model_identity.h"
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
  int64_t mb = 256, round_trips = 2000, streams = tg::rpc::ClientOptions{}.upload_streams;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mb") == 0) (void)absl::SimpleAtoi(argv[i + 1], &mb);
    if (std::strcmp(argv[i], "--round-trips") == 0)
      (void)absl::SimpleAtoi(argv[i + 1], &round_trips);
    if (std::strcmp(argv[i], "--streams") == 0) (void)absl::SimpleAtoi(argv[i + 1], &streams);
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
  client_options.upload_streams = static_cast<int>(streams);
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

  // 2. Upload throughput, from `total` bytes of client memory (as a mapped model file).
  const size_t total = static_cast<size_t>(mb) << 20;
  std::string bytes(total, '\0');
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&bytes[i], &v, 8);
  }
  auto alloc = [&]() -> absl::StatusOr<uint64_t> {
    pb::SessionRequest r;
    r.mutable_alloc_buffer()->set_device(0);
    r.mutable_alloc_buffer()->set_size(total);
    auto reply = c.Call(r);
    if (!reply.ok()) return reply.status();
    return reply->alloc_buffer().buffer();
  };
  auto free_buffer = [&](uint64_t handle) {
    pb::SessionRequest r;
    r.mutable_free_buffer()->set_buffer(handle);
    (void)c.Call(r);
  };
  // The model loader's path: 16 MiB pieces of borrowed memory (no copy on the client), on
  // the connection's parallel streams; `digest` as a .tghash sidecar gives it (the server
  // verifies), else no hash at all.
  constexpr size_t kPiece = tg::rpc::kPieceBytes;
  auto load = [&](uint64_t handle, bool digest, uint64_t salt) -> absl::StatusOr<double> {
    std::memcpy(&bytes[0], &salt, 8);  // distinct content per run: no accidental cache hits.
    std::vector<tg::rpc::UploadJob> jobs;
    for (size_t off = 0; off < total; off += kPiece) {
      tg::rpc::UploadJob job;
      job.buffer = handle;
      job.offset = off;
      job.borrowed = reinterpret_cast<const uint8_t*>(bytes.data()) + off;
      job.borrowed_size = std::min(kPiece, total - off);
      job.cacheable = digest;
      if (digest) job.digest = tg::rpc::Sha256(job.borrowed, job.borrowed_size);
      jobs.push_back(std::move(job));
    }
    const auto start = Clock::now();
    for (tg::rpc::UploadJob& job : jobs) {
      if (auto s = c.QueueUpload(std::move(job)); !s.ok()) return s;
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
          chunk.set_data(bytes.data() + off, std::min(tg::rpc::kChunkBytes, total - off));
          w->Write(chunk);
        }
        w->WritesDone();
        w->Finish();
      });
    }
    for (auto& th : threads) th.join();
    return total / 1e6 / Seconds(start, Clock::now());
  };
  auto fresh = alloc();
  if (!fresh.ok()) return Fail(fresh.status());
  auto into_fresh = load(*fresh, false, 1);  // first touch of the server's memory.
  if (!into_fresh.ok()) return Fail(into_fresh.status());
  auto into_warm = load(*fresh, false, 2);  // the same memory again.
  if (!into_warm.ok()) return Fail(into_warm.status());
  auto verified = load(*fresh, true, 3);  // digests from a "sidecar": the server hashes.
  if (!verified.ok()) return Fail(verified.status());
  free_buffer(*fresh);
  const double raw1 = raw(1), raw4 = raw(4), best = std::max(raw1, raw4);
  std::printf("plain gRPC byte stream: %.0f MB/s (1 stream), %.0f MB/s (4 streams)\n", raw1, raw4);
  std::printf("upload %lld MiB, the model loader's path (%d streams, no copy on the client):\n",
              static_cast<long long>(mb), c.upload_streams());
  std::printf("  into memory already touched: %.0f MB/s (%.2fx the plain stream)\n", *into_warm,
              *into_warm / best);
  std::printf(
      "  into fresh memory:           %.0f MB/s (%.2fx; the difference is the server's "
      "first touch of the pages)\n",
      *into_fresh, *into_fresh / best);
  std::printf("  with SHA-256 (from a sidecar, verified by the server): %.0f MB/s (%.2fx)\n",
              *verified, *verified / best);
  server->Shutdown();
  return 0;
}
