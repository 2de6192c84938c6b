#include "client/piece_rows.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "client/connection.h"
#include "core/status_macros.h"
#include "proto/parallel_hash.h"
#include "proto/protocol.h"

namespace tg::rpc {
namespace {

// A FillPieces call reads at most this many bytes of pieces on the server (protocol.h's
// kMaxFillBytes is the hard limit), so that progress moves while it reads.
constexpr uint64_t kRowsCallBytes = uint64_t{1} << 30;

struct Region {
  size_t copy = 0;
  size_t piece = 0;
  UploadJob::Rows rows;
  uint64_t buffer_offset = 0;
  uint64_t span() const { return (rows.rows - 1) * rows.buffer_stride + rows.row_size; }
};

// The piece holding file byte `at`, or nullopt (a byte between tensors).
std::optional<size_t> PieceAt(const std::vector<FileRange>& pieces, uint64_t at) {
  auto it = std::upper_bound(pieces.begin(), pieces.end(), at,
                             [](uint64_t v, const FileRange& p) { return v < p.offset; });
  if (it == pieces.begin()) return std::nullopt;
  --it;
  if (at >= it->offset + it->size) return std::nullopt;
  return static_cast<size_t>(it - pieces.begin());
}

// Cuts copy c into regions of whole rows inside one piece (a row across a piece boundary:
// one region per part). False when some byte lies in no piece.
bool Cut(const RowsCopy& c, size_t index, const std::vector<FileRange>& pieces,
         std::vector<Region>* out) {
  for (uint64_t r = 0; r < c.rows;) {
    const uint64_t start = c.file_offset + r * c.file_stride;
    std::optional<size_t> p = PieceAt(pieces, start);
    if (!p.has_value()) return false;
    const uint64_t end = pieces[*p].offset + pieces[*p].size;
    if (start + c.row_size <= end) {
      uint64_t k = 1;
      if (c.rows - r > 1 && c.file_stride > 0) {
        k += std::min(c.rows - r - 1, (end - start - c.row_size) / c.file_stride);
      }
      out->push_back({index,
                      *p,
                      {start - pieces[*p].offset, c.row_size, k, k > 1 ? c.file_stride : c.row_size,
                       k > 1 ? c.buffer_stride : c.row_size},
                      c.buffer_offset + r * c.buffer_stride});
      r += k;
      continue;
    }
    uint64_t at = start, dst = c.buffer_offset + r * c.buffer_stride, left = c.row_size;
    while (left > 0) {
      std::optional<size_t> q = PieceAt(pieces, at);
      if (!q.has_value()) return false;
      const uint64_t n = std::min(left, pieces[*q].offset + pieces[*q].size - at);
      out->push_back({index, *q, {at - pieces[*q].offset, n, 1, n, n}, dst});
      at += n;
      dst += n;
      left -= n;
    }
    ++r;
  }
  return true;
}

// Regions into calls: at most kMaxFillPieces and kRowsCallBytes of pieces each, and no two
// whose buffer spans overlap (the server refuses that), by buffer offset.
std::vector<std::vector<size_t>> Calls(const std::vector<Region>& regions,
                                       const std::vector<FileRange>& pieces) {
  std::vector<size_t> order(regions.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return regions[a].buffer_offset < regions[b].buffer_offset;
  });
  struct Open {
    std::vector<size_t> regions;
    uint64_t end = 0, bytes = 0;
  };
  std::vector<Open> open;
  std::vector<std::vector<size_t>> calls;
  for (size_t i : order) {
    const Region& r = regions[i];
    const uint64_t bytes = pieces[r.piece].size;
    auto fits = [&](const Open& o) {
      return o.end <= r.buffer_offset && o.bytes + bytes <= kRowsCallBytes &&
             o.regions.size() < kMaxFillPieces;
    };
    auto it = std::find_if(open.begin(), open.end(), fits);
    if (it == open.end()) it = open.insert(open.end(), Open{});
    it->regions.push_back(i);
    it->end = r.buffer_offset + r.span();
    it->bytes += bytes;
  }
  for (Open& o : open) calls.push_back(std::move(o.regions));
  return calls;
}

}  // namespace

absl::StatusOr<std::vector<bool>> FillRowsFromPieces(const ModelFileView& file,
                                                     RemoteBuffer* buffer,
                                                     absl::Span<const RowsCopy> copies,
                                                     const ModelUploadOptions& options,
                                                     BufferLoad* load) {
  std::vector<bool> done(copies.size(), false);
  Connection* conn = buffer->connection();
  if (copies.empty() || conn->hello().protocol_minor() < kMinorPieceRegions) return done;
  const ModelIdentity identity =
      IdentityOf(file.bytes.subspan(0, file.data_start), file.bytes.size());
  uint64_t model_file = 0;
  if (conn->HasModelDir()) {
    absl::StatusOr<tensorgrid::v1::OpenModelFileReply> opened = conn->OpenModelFile("", identity);
    if (opened.ok()) {
      model_file = opened->file();
      load->model_file = opened->name();
    } else if (!absl::IsNotFound(opened.status())) {
      return opened.status();
    }
  }
  if (model_file == 0 && !conn->MayHaveCache()) return done;
  if (model_file == 0 && conn->StoresUnhashed()) {  // an empty cache has none of the pieces.
    TG_ASSIGN_OR_RETURN(const uint64_t blobs, conn->CacheBlobs());
    if (blobs == 0) return done;
  }
  const std::vector<FileRange> pieces = SplitIntoPieces(file.tensors);
  std::vector<Region> regions;
  std::vector<bool> cut(copies.size(), false);
  for (size_t c = 0; c < copies.size(); ++c) {
    std::vector<Region> mine;
    cut[c] = Cut(copies[c], c, pieces, &mine);
    if (cut[c]) regions.insert(regions.end(), mine.begin(), mine.end());
  }
  // The pieces' hashes: the sidecar's, else computed (each piece once, on all cores).
  std::vector<std::optional<Sha256Digest>> digests(pieces.size());
  const std::function<void(const std::string&)> warn =
      options.warn ? options.warn
                   : [](const std::string& m) { std::fprintf(stderr, "warning: %s\n", m.c_str()); };
  if (std::optional<std::vector<PieceHash>> sidecar = ReadSidecarFor(file, pieces, warn)) {
    for (size_t i = 0; i < sidecar->size() && i < pieces.size(); ++i) {
      if ((*sidecar)[i].range == pieces[i]) digests[i] = (*sidecar)[i].digest;
    }
  }
  std::vector<size_t> unhashed;
  for (const Region& r : regions) {
    if (!digests[r.piece].has_value()) unhashed.push_back(r.piece);
  }
  std::sort(unhashed.begin(), unhashed.end());
  unhashed.erase(std::unique(unhashed.begin(), unhashed.end()), unhashed.end());
  TG_RETURN_IF_ERROR(ParallelForEach(unhashed.size(), options.hash_threads, [&](size_t i) {
    const FileRange& p = pieces[unhashed[i]];
    digests[unhashed[i]] = Sha256(file.bytes.data() + p.offset, p.size);
    return absl::OkStatus();
  }));
  for (size_t i : unhashed) load->hashed += pieces[i].size;
  std::atomic<uint64_t> from_file{0}, cached{0};
  std::vector<UploadJob> jobs(regions.size());
  for (size_t i = 0; i < regions.size(); ++i) {
    const FileRange& p = pieces[regions[i].piece];
    UploadJob& j = jobs[i];
    j.buffer = buffer->handle();
    j.offset = regions[i].buffer_offset;
    j.borrowed = file.bytes.data() + p.offset;
    j.borrowed_size = p.size;
    j.cacheable = true;
    j.digest = digests[regions[i].piece];
    j.model_file = model_file;
    j.file_offset = p.offset;
    j.region = regions[i].rows;
    j.on_done = [&, written = j.written()](const UploadResult& r) {
      from_file += r.from_file;
      cached += r.skipped;
      if (options.on_placed) options.on_placed(written);
    };
  }
  const std::vector<std::vector<size_t>> calls = Calls(regions, pieces);
  std::vector<char> filled(regions.size(), 0);
  TG_RETURN_IF_ERROR(ParallelForEach(
      calls.size(), std::max(1, conn->upload_streams()), [&](size_t c) -> absl::Status {
        std::vector<const UploadJob*> offered;
        for (size_t i : calls[c]) offered.push_back(&jobs[i]);
        absl::StatusOr<std::vector<bool>> got = conn->FillPieces(offered);
        if (absl::IsUnimplemented(got.status())) return absl::OkStatus();
        TG_RETURN_IF_ERROR(got.status());
        for (size_t k = 0; k < calls[c].size(); ++k) filled[calls[c][k]] = (*got)[k];
        return absl::OkStatus();
      }));
  for (size_t c = 0; c < copies.size(); ++c) done[c] = cut[c];
  for (size_t i = 0; i < regions.size(); ++i) {
    if (!filled[i]) done[regions[i].copy] = false;
  }
  load->from_file += from_file.load();
  load->cached += cached.load();
  return done;
}

}  // namespace tg::rpc
