// libFuzzer entry point for rpc-server's Session and Upload logic. The input is a sequence of
// records, each a u32 little-endian length word and that many bytes, fed to one in-process
// Session on the CPU devices with a 16 MiB memory limit, which is then destroyed:
//   - top bit clear: a serialized SessionRequest, run by Session::Serve;
//   - bit 30 set (kDeliverRecord): the low 30 bits give the length of a serialized
//     PeerDeliverRequest, as a peer server delivers pushed pieces (PeerPushes::Receive); a
//     piece whose grant is "buffer:N" gets the session's grant of buffer N instead (as a
//     GrantPeerRead would give it; nothing else could know it), so that the session's
//     AwaitPush commands, which wait 1 ms here, can take it;
//   - top bit set (kUploadRecord): the low 31 bits give the length of a serialized
//     UploadMessage, one message of an Upload stream as the service feeds it to an UploadSink
//     (server/service.cc): with no stream open a header starts one (session id "fuzz"; any
//     other is NOT_FOUND) and anything else is dropped, as the service refuses a stream that
//     does not open with a header; with a stream open every message goes to Receive (an error
//     ends the stream), and an empty record ends it (the client's WritesDone: Finish). The end
//     of the input ends an open stream too. Uploads hit and fill a small on-disk BlobCache,
//     fresh for each input, so that every input runs the same way on its own, and may be
//     served from a --model-dir holding one small model (tests/fuzz/fuzz_model_file.h),
//     indexed once at start and never changed, which OpenModelFile commands look up.
// Any input must leave the process intact and, once the session is gone, no buffer held; an
// upload that succeeded with a SHA-256 must have left bytes with that hash in the buffer.
// Built as a libFuzzer binary (clang, TG_FUZZ=ON: rpc_session_fuzz) or linked into
// rpc_session_fuzz_replay.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "backends/register_builtin.h"
#include "core/registry.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/content_hash.h"
#include "server/blob_cache.h"
#include "server/grant_table.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/model_index.h"
#include "server/peer_pushes.h"
#include "server/session.h"
#include "server/upload_sink.h"
#include "tensorgrid/v1/tensorgrid.pb.h"
#include "tests/fuzz/fuzz_model_file.h"

namespace {

namespace fs = std::filesystem;
namespace pb = ::tensorgrid::v1;

constexpr uint64_t kMemLimit = uint64_t{16} << 20;
constexpr int kMaxRecords = 64;
constexpr uint32_t kUploadRecord = 0x80000000u;
constexpr uint32_t kDeliverRecord = 0x40000000u;
// How long an AwaitPush waits for its piece: no peer will send one that is not there yet.
constexpr absl::Duration kPieceWait = absl::Milliseconds(1);
// Small, so that fuzzed uploads reach eviction and the too-large-to-keep path.
constexpr uint64_t kCacheMaxBytes = 1024;
constexpr char kSessionId[] = "fuzz";

struct Env {
  tg::server::Metrics metrics;
  tg::server::GrantTable grants;
  tg::server::SessionEnv session_env;
  fs::path cache_dir;
  std::unique_ptr<tg::server::ModelIndex> models;
  bool verbose = false;

  Env() {
    // Invalid UTF-8 in string fields is logged by protobuf on every parse: keep it quiet.
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    verbose = std::getenv("TG_FUZZ_VERBOSE") != nullptr;
    // Corrupt-cache and store warnings are expected here; only verbose runs want them.
    tg::server::SetLogLevel(verbose ? tg::server::LogLevel::kDebug : tg::server::LogLevel::kError);
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
    // Memory-backed when possible: the cache fsyncs every blob it stores.
    std::error_code ec;
    const fs::path base =
        fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    cache_dir = base / ("tg_rpc_fuzz_cache_" + std::to_string(::getpid()));
    OpenModelDir(base / ("tg_rpc_fuzz_models_" + std::to_string(::getpid())));
  }

  // A --model-dir with the fuzz model, indexed before the first input runs.
  void OpenModelDir(const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string bytes = tg::fuzz::MakeFuzzModelFile().bytes;
    std::FILE* f = std::fopen((dir / "model.gguf").c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
    std::fclose(f);
    absl::StatusOr<tg::server::ModelDir> d = tg::server::OpenModelDir(dir.string());
    if (!d.ok()) std::abort();
    models = std::make_unique<tg::server::ModelIndex>(
        tg::server::ModelIndexOptions{{*d}, "", 1, nullptr});
    models->WaitUntilIndexed();
    if (models->file_count() != 1) std::abort();
    session_env.models = models.get();
    fs::remove_all(dir, ec);  // the index keeps the file open; nothing is left behind.
  }
};

Env& GetEnv() {
  static Env* env = new Env();
  return *env;
}

// Runs one SessionRequest record; every command gets one reply, in order (a batch's grouped).
void RunSessionRequest(Env& env, tg::server::Session& session, const pb::SessionRequest& request) {
  int answered = 0;
  session.Serve(request, [&](const pb::SessionReply& reply) {
    if (reply.id() != request.id()) std::abort();
    if (!request.has_batch()) {
      ++answered;
    } else {
      if (!reply.has_batch()) std::abort();
      for (const pb::SessionReply& r : reply.batch().replies()) {
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

// The Upload streams of one input, one at a time, as TensorGridService::Upload runs them.
class UploadDriver {
 public:
  UploadDriver(Env& env, std::shared_ptr<tg::server::Session> session)
      : env_(env), session_(std::move(session)) {}
  ~UploadDriver() {
    EndStream();
    if (cache_ != nullptr) {
      cache_.reset();
      std::error_code ec;
      fs::remove_all(env_.cache_dir, ec);
    }
  }

  void Feed(const pb::UploadMessage& message) {
    if (sink_ == nullptr) {
      if (message.part_case() == pb::UploadMessage::kHeader) StartStream(message.header());
      return;
    }
    if (message.part_case() == pb::UploadMessage::PART_NOT_SET) return EndStream();
    if (absl::Status s = sink_->Receive(message); !s.ok()) {
      Report("receive", s);
      sink_.reset();
    }
  }
  // Session commands ran while a stream was open: they may have changed its bytes.
  void SessionCommandRan() {
    if (sink_ != nullptr) interleaved_ = true;
  }

 private:
  void StartStream(const pb::UploadHeader& header) {
    if (header.session_id() != kSessionId) return Report("start", absl::NotFoundError("session"));
    absl::StatusOr<std::unique_ptr<tg::server::UploadSink>> sink =
        tg::server::UploadSink::Start(session_, header, Cache(), &env_.metrics, env_.models.get());
    if (!sink.ok()) return Report("start", sink.status());
    header_ = header;
    interleaved_ = false;
    if ((*sink)->have_it()) {
      Report("start (have it)", absl::OkStatus());
      CheckLanded();
      return;
    }
    sink_ = std::move(*sink);
  }

  void EndStream() {
    if (sink_ == nullptr) return;
    absl::StatusOr<uint64_t> received = sink_->Finish();
    sink_.reset();
    Report("finish", received.status());
    if (!received.ok()) return;
    if (*received != header_.size()) std::abort();
    if (!interleaved_) CheckLanded();
    if (cache_ != nullptr && cache_->total_bytes() > kCacheMaxBytes) std::abort();
  }

  // A successful hashed upload (or cache hit) left bytes with the header's hash.
  void CheckLanded() {
    if (header_.sha256().empty()) return;
    absl::StatusOr<std::shared_ptr<tg::server::SessionBuffer>> buf =
        session_->FindBuffer(header_.buffer());
    if (!buf.ok()) std::abort();  // it was there at the start and nothing ran since.
    std::string bytes(header_.size(), '\0');
    if (!(*buf)->Read(header_.offset(), bytes.data(), bytes.size()).ok()) std::abort();
    const tg::rpc::Sha256Digest got = tg::rpc::Sha256(bytes.data(), bytes.size());
    if (header_.sha256() != std::string(got.begin(), got.end())) std::abort();
  }

  tg::server::BlobCache* Cache() {
    if (cache_ == nullptr) {
      std::error_code ec;
      fs::remove_all(env_.cache_dir, ec);
      absl::StatusOr<std::unique_ptr<tg::server::BlobCache>> cache =
          tg::server::BlobCache::Open(env_.cache_dir.string(), kCacheMaxBytes);
      if (!cache.ok()) std::abort();
      cache_ = std::move(*cache);
    }
    return cache_.get();
  }

  void Report(const char* step, const absl::Status& status) {
    if (env_.verbose) std::fprintf(stderr, "upload %s: %s\n", step, status.ToString().c_str());
  }

  Env& env_;
  std::shared_ptr<tg::server::Session> session_;
  std::unique_ptr<tg::server::BlobCache> cache_;  // opened by the first upload.
  std::unique_ptr<tg::server::UploadSink> sink_;  // the open stream, if any.
  pb::UploadHeader header_;                       // the last started stream's.
  bool interleaved_ = false;
};

}  // namespace

// A peer's delivery to this server, "buffer:N" grants replaced by the session's.
void Deliver(tg::server::PeerPushes& pushes, tg::server::Session& session,
             pb::PeerDeliverRequest& request) {
  for (pb::DeliveredPiece& piece : *request.mutable_pieces()) {
    uint64_t handle = 0;
    if (piece.grant().rfind("buffer:", 0) != 0) continue;
    if (!absl::SimpleAtoi(piece.grant().substr(7), &handle)) continue;
    pb::SessionRequest grant;
    grant.set_id(1);
    grant.mutable_grant_peer_read()->set_buffer(handle);
    const pb::SessionReply reply = session.Handle(grant);
    if (reply.code() == 0) piece.set_grant(reply.grant().grant());
  }
  (void)pushes.Receive(request);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Env& env = GetEnv();
  {
    // Fresh per input (so is its mailbox), with no peer to push to or to watch.
    tg::server::PeerPushes pushes(nullptr, &env.grants, &env.metrics, kPieceWait);
    tg::server::SessionEnv session_env = env.session_env;
    session_env.pushes = &pushes;
    auto session = std::make_shared<tg::server::Session>(kSessionId, session_env);
    UploadDriver uploads(env, session);
    pb::SessionRequest request;
    pb::UploadMessage upload;
    pb::PeerDeliverRequest delivery;
    size_t pos = 0;
    for (int n = 0; n < kMaxRecords && size - pos >= 4; ++n) {
      uint32_t word;
      std::memcpy(&word, data + pos, 4);
      pos += 4;
      const bool deliver = (word & kUploadRecord) == 0 && (word & kDeliverRecord) != 0;
      const uint32_t len = word & ~(kUploadRecord | (deliver ? kDeliverRecord : 0));
      if (len > size - pos) break;
      if (deliver) {
        if (delivery.ParseFromArray(data + pos, static_cast<int>(len))) {
          Deliver(pushes, *session, delivery);
        }
      } else if ((word & kUploadRecord) == 0) {
        if (request.ParseFromArray(data + pos, static_cast<int>(len))) {
          RunSessionRequest(env, *session, request);
          uploads.SessionCommandRan();
        }
      } else if (upload.ParseFromArray(data + pos, static_cast<int>(len))) {
        uploads.Feed(upload);
      }
      pos += len;
    }
  }
  // The session is gone: everything it allocated must be too.
  if (env.metrics.buffers() != 0 || env.metrics.buffer_bytes() != 0) std::abort();
  if (env.grants.size() != 0) std::abort();
  return 0;
}
