#include "client/model_upload.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "client/load_progress.h"
#include "core/status_macros.h"
#include "proto/model_hashes.h"
#include "proto/parallel_hash.h"
#include "proto/protocol.h"

namespace tg::rpc {
namespace {

// What one server will get and how.
struct ServerPlan {
  Connection* connection = nullptr;
  bool need_digest = false;  // it can use piece hashes (a cache, or its own copy of the file).
  bool store = false;        // its cache is empty: it hashes and stores what it gets itself.
  uint64_t model_file = 0;   // OpenModelFile handle; 0: it has no copy.
  std::string model_file_name;
  uint64_t bytes = 0;
};

struct Job {
  size_t server = 0;
  RemoteBuffer* buffer = nullptr;
  UploadJob upload;
};

int64_t MtimeNs(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

void WarnToStderr(const std::string& message) {
  std::fprintf(stderr, "warning: %s\n", message.c_str());
}

// One plan per server that `copies` reach, in first-seen order; asks each server with a
// --model-dir for its copy of the file.
absl::StatusOr<std::vector<ServerPlan>> PlanServers(
    absl::Span<const WeightCopy> copies, const ModelIdentity& identity,
    absl::flat_hash_map<Connection*, size_t>* index) {
  std::vector<ServerPlan> plans;
  for (const WeightCopy& c : copies) {
    Connection* conn = c.buffer->connection();
    auto [it, added] = index->try_emplace(conn, plans.size());
    if (added) {
      ServerPlan plan;
      plan.connection = conn;
      plan.need_digest = conn->MayHaveCache();
      if (conn->HasModelDir()) {
        absl::StatusOr<tensorgrid::v1::OpenModelFileReply> file = conn->OpenModelFile("", identity);
        if (file.ok()) {
          plan.model_file = file->file();
          plan.model_file_name = file->name();
          plan.need_digest = true;
        } else if (!absl::IsNotFound(file.status())) {
          return file.status();
        }
      }
      // An empty cache has none of the pieces: hashing them here would only slow the load
      // (the server hashes what it stores anyway).
      if (plan.need_digest && plan.model_file == 0 && conn->StoresUnhashed()) {
        TG_ASSIGN_OR_RETURN(const uint64_t blobs, conn->CacheBlobs());
        plan.store = blobs == 0;
        plan.need_digest = !plan.store;
      }
      plans.push_back(std::move(plan));
    }
    plans[it->second].bytes += c.range.size;
  }
  return plans;
}

// The upload jobs of every copy, one per piece, largest first (so that the streams of a
// server finish together).
std::vector<Job> MakeJobs(const ModelFileView& file, absl::Span<const WeightCopy> copies,
                          const absl::flat_hash_map<Connection*, size_t>& index,
                          const std::vector<ServerPlan>& plans,
                          const absl::flat_hash_map<uint64_t, const PieceHash*>& known) {
  std::vector<Job> jobs;
  for (const WeightCopy& c : copies) {
    const size_t server = index.at(c.buffer->connection());
    const ServerPlan& plan = plans[server];
    for (uint64_t done = 0; done < c.range.size; done += kPieceBytes) {
      Job job;
      job.server = server;
      job.buffer = c.buffer;
      UploadJob& u = job.upload;
      u.buffer = c.buffer->handle();
      u.offset = c.buffer_offset + done;
      u.file_offset = c.range.offset + done;
      u.borrowed = file.bytes.data() + u.file_offset;
      u.borrowed_size = std::min(kPieceBytes, c.range.size - done);
      u.cacheable = plan.need_digest;
      u.store = plan.store;
      u.model_file = plan.model_file;
      auto it = known.find(u.file_offset);
      if ((plan.need_digest || plan.store) && it != known.end() &&
          it->second->range.size == u.borrowed_size) {
        // A sidecar's digest costs nothing to send, and the server checks it (a stale
        // sidecar is found) as it hashes what it stores.
        u.digest = it->second->digest;
        u.cacheable = true;
        u.store = false;
      }
      jobs.push_back(std::move(job));
    }
  }
  std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return a.upload.borrowed_size > b.upload.borrowed_size;
  });
  return jobs;
}

// A FillPieces call offers at most this many bytes, so that the progress line moves while a
// server reads a large model from its disk.
constexpr uint64_t kFillCallBytes = uint64_t{1} << 30;

// Whether the job is offered to its server by FillKnownPieces: its digest is known already
// (a sidecar) and the server may have the bytes (a cache, a copy of the file).
bool OfferedToFill(const Job& job, const std::vector<ServerPlan>& plans) {
  return plans[job.server].need_digest && job.upload.digest.has_value();
}

// Offers the jobs marked in `offered` (OfferedToFill) to their servers: per server,
// upload_streams() FillPieces calls at once (more when a call would hold over kMaxFillPieces
// pieces or kFillCallBytes), instead of an Upload call per piece. Sets (*filled)[j] for each
// job a server filled; a server without FillPieces fills none. Reads no other job (another
// thread queues those meanwhile).
absl::Status FillKnownPieces(const std::vector<Job>& jobs, const std::vector<ServerPlan>& plans,
                             const std::vector<char>& offered, std::vector<char>* filled) {
  struct Call {
    size_t server = 0;
    std::vector<size_t> jobs;
  };
  std::vector<Call> calls;
  int threads = 0;
  for (size_t s = 0; s < plans.size(); ++s) {
    std::vector<size_t> known;
    uint64_t bytes = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (offered[j] && jobs[j].server == s) {
        known.push_back(j);
        bytes += jobs[j].upload.size();
      }
    }
    if (known.empty()) continue;
    const int streams = std::max(1, plans[s].connection->upload_streams());
    threads += streams;
    const size_t n =
        std::min(known.size(),
                 std::max({static_cast<size_t>(streams),
                           (known.size() + kMaxFillPieces - 1) / kMaxFillPieces,
                           static_cast<size_t>((bytes + kFillCallBytes - 1) / kFillCallBytes)}));
    const size_t first = calls.size();
    calls.resize(first + n);
    // Round robin over pieces sorted largest first: the calls carry about the same bytes.
    for (size_t k = 0; k < known.size(); ++k) {
      calls[first + k % n].server = s;
      calls[first + k % n].jobs.push_back(known[k]);
    }
  }
  return ParallelForEach(calls.size(), threads, [&](size_t c) {
    std::vector<const UploadJob*> pieces;
    for (size_t j : calls[c].jobs) pieces.push_back(&jobs[j].upload);
    absl::StatusOr<std::vector<bool>> got = plans[calls[c].server].connection->FillPieces(pieces);
    if (absl::IsUnimplemented(got.status())) return absl::OkStatus();  // uploads ask one by one.
    TG_RETURN_IF_ERROR(got.status());
    for (size_t i = 0; i < pieces.size(); ++i) (*filled)[calls[c].jobs[i]] = (*got)[i];
    return absl::OkStatus();
  });
}

}  // namespace

ModelFileView ModelFileViewOf(const WeightSource& source) {
  ModelFileView view;
  view.path = source.path;
  view.bytes = source.mapping;
  view.data_start = source.header_bytes;
  view.tensors.reserve(source.tensors.size());
  for (const FileExtent& e : source.tensors) view.tensors.push_back({e.offset, e.size});
  return view;
}

std::optional<std::vector<PieceHash>> ReadSidecarFor(
    const ModelFileView& file, absl::Span<const FileRange> pieces,
    const std::function<void(const std::string&)>& warn) {
  const std::string path = SidecarPath(file.path);
  absl::StatusOr<ModelHashes> sidecar = ReadModelHashes(path);
  if (absl::IsNotFound(sidecar.status())) return std::nullopt;
  if (!sidecar.ok()) {
    warn(absl::StrCat(sidecar.status().message(),
                      "; hashing the model instead (re-run tg-gguf hash ", file.path, ")"));
    return std::nullopt;
  }
  const ModelIdentity identity =
      IdentityOf(file.bytes.subspan(0, file.data_start), file.bytes.size());
  if (absl::Status s = CheckModelHashes(*sidecar, identity, MtimeNs(file.path), pieces); !s.ok()) {
    warn(absl::StrCat(path, " does not fit ", file.path, ": ", s.message(),
                      "; hashing the model instead (re-run tg-gguf hash ", file.path, ")"));
    return std::nullopt;
  }
  return std::move(sidecar->pieces);
}

absl::StatusOr<std::vector<BufferLoad>> UploadModelWeights(const ModelFileView& file,
                                                           absl::Span<const WeightCopy> copies,
                                                           const ModelUploadOptions& options) {
  const auto warn = options.warn ? options.warn : WarnToStderr;
  const ModelIdentity identity =
      IdentityOf(file.bytes.subspan(0, file.data_start), file.bytes.size());
  absl::flat_hash_map<Connection*, size_t> index;
  TG_ASSIGN_OR_RETURN(std::vector<ServerPlan> plans, PlanServers(copies, identity, &index));
  const bool any_digest = std::any_of(plans.begin(), plans.end(),
                                      [](const ServerPlan& p) { return p.need_digest || p.store; });
  const std::vector<FileRange> pieces = SplitIntoPieces(file.tensors);
  std::optional<std::vector<PieceHash>> sidecar;
  if (any_digest) sidecar = ReadSidecarFor(file, pieces, warn);
  absl::flat_hash_map<uint64_t, const PieceHash*> known;
  if (sidecar.has_value()) {
    for (const PieceHash& p : *sidecar) known[p.range.offset] = &p;
  }
  std::vector<Job> jobs = MakeJobs(file, copies, index, plans, known);

  // Per buffer: what its jobs did, filled in by the pools' threads.
  struct Tally {
    std::atomic<uint64_t> sent{0}, cached{0}, from_file{0}, bytes{0}, hashed{0};
    std::atomic<int64_t> last_done_ns{0};
  };
  const absl::Time start = absl::Now();
  std::vector<std::pair<const WeightCopy*, std::unique_ptr<Tally>>> tallies;
  absl::flat_hash_map<RemoteBuffer*, Tally*> tally_of;
  for (const WeightCopy& c : copies) {
    if (!tally_of.contains(c.buffer)) {
      tallies.emplace_back(&c, std::make_unique<Tally>());
      tally_of[c.buffer] = tallies.back().second.get();
    }
    tally_of[c.buffer]->bytes += c.range.size;
  }
  std::atomic<bool> stale_warned{false};
  const std::string sidecar_path = SidecarPath(file.path);
  for (Job& j : jobs) {
    if (j.upload.digest.has_value()) {  // from the sidecar.
      j.upload.on_stale_digest = [&stale_warned, &warn, sidecar_path] {
        if (!stale_warned.exchange(true)) {
          warn(absl::StrCat(sidecar_path,
                            " is stale: a piece hashes differently now; sending such pieces "
                            "with their own hashes (re-run tg-gguf hash)"));
        }
      };
    }
    Tally* t = tally_of.at(j.buffer);
    j.upload.on_done = [t, start, size = j.upload.size(),
                        on_placed = &options.on_placed](const UploadResult& r) {
      if (*on_placed) (*on_placed)(size);
      t->sent += r.sent;
      t->cached += r.skipped;
      t->from_file += r.from_file;
      const int64_t ns = absl::ToInt64Nanoseconds(absl::Now() - start);
      for (int64_t seen = t->last_done_ns.load(); ns > seen;) {
        if (t->last_done_ns.compare_exchange_weak(seen, ns)) break;
      }
    };
  }

  std::vector<UploadStats> before;
  for (const ServerPlan& p : plans) before.push_back(p.connection->upload_stats());
  absl::Status status;
  {
    LoadProgress progress(options.progress, [&] {
      std::vector<ServerProgress> out;
      for (size_t i = 0; i < plans.size(); ++i) {
        const UploadStats s = plans[i].connection->upload_stats();
        const uint64_t done = s.done - before[i].done;
        const absl::Time until = done >= plans[i].bytes ? s.last_done : absl::Now();
        out.push_back({plans[i].connection->endpoint(), done, plans[i].bytes,
                       absl::ToDoubleSeconds(until - start)});
      }
      return out;
    });
    // Pieces without a known hash are hashed on all cores, each queued as soon as its hash
    // is there, so that the first ones are on the wire while the rest are hashed.
    const bool hashing = std::any_of(jobs.begin(), jobs.end(), [](const Job& j) {
      return j.upload.cacheable && !j.upload.digest.has_value();
    });
    auto queue = [&](size_t i) {
      UploadJob& u = jobs[i].upload;
      if (u.cacheable && !u.digest.has_value()) {
        u.digest = Sha256(u.data(), u.size());
        tally_of.at(jobs[i].buffer)->hashed += u.size();
      }
      return plans[jobs[i].server].connection->QueueUpload(std::move(u));
    };
    // Pieces with a known hash are first offered to the servers that may have them, on a
    // thread of their own, while every other piece is queued; what the servers did not fill
    // is queued after.
    // (char, not vector<bool>: threads set their own jobs' entries.)
    std::vector<char> offered(jobs.size()), filled(jobs.size(), 0);
    for (size_t i = 0; i < jobs.size(); ++i) offered[i] = OfferedToFill(jobs[i], plans);
    absl::Status fill_status;
    std::thread filler([&] { fill_status = FillKnownPieces(jobs, plans, offered, &filled); });
    status = ParallelForEach(jobs.size(), hashing ? options.hash_threads : 1,
                             [&](size_t i) { return offered[i] ? absl::OkStatus() : queue(i); });
    filler.join();
    if (status.ok()) status = fill_status;
    for (size_t i = 0; status.ok() && i < jobs.size(); ++i) {
      if (offered[i] && !filled[i]) status = queue(i);
    }
    for (const ServerPlan& p : plans) {
      absl::Status s = p.connection->WaitUploads();
      if (status.ok()) status = s;
    }
  }
  TG_RETURN_IF_ERROR(status);
  std::vector<BufferLoad> loads;
  for (const auto& [copy, t] : tallies) {
    BufferLoad load;
    load.buffer = copy->buffer;
    Connection* conn = copy->buffer->connection();
    load.endpoint = conn->endpoint();
    load.bytes = t->bytes.load();
    load.sent = t->sent.load();
    load.cached = t->cached.load();
    load.from_file = t->from_file.load();
    load.hashed = t->hashed.load();
    load.seconds = t->last_done_ns.load() / 1e9;
    load.model_file = plans[index.at(conn)].model_file_name;
    loads.push_back(std::move(load));
  }
  return loads;
}

}  // namespace tg::rpc
