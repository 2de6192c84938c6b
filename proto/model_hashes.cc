#include "proto/model_hashes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tg::rpc {
namespace {

constexpr absl::string_view kMagic = "TGHASH01";
constexpr size_t kFixedBytes = 8 + 8 + kSha256Bytes + 8 + 8 + 8;  // up to the piece count.
constexpr size_t kPieceRecordBytes = 8 + 8 + kSha256Bytes;

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutDigest(std::string* out, const Sha256Digest& d) {
  out->append(reinterpret_cast<const char*>(d.data()), d.size());
}

// Reads fields in order from bytes whose length the caller has checked.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : p_(reinterpret_cast<const uint8_t*>(bytes.data())) {}
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{p_[i]} << (8 * i);
    p_ += 8;
    return v;
  }
  Sha256Digest Digest() {
    Sha256Digest d;
    std::memcpy(d.data(), p_, d.size());
    p_ += d.size();
    return d;
  }

 private:
  const uint8_t* p_;
};

std::string Describe(const ModelIdentity& id) {
  return absl::StrCat(id.size, " bytes, header sha256 ", DigestHex(id.header).substr(0, 16));
}

}  // namespace

std::string SidecarPath(absl::string_view model_path) {
  return absl::StrCat(model_path, ".tghash");
}

std::string SerializeModelHashes(const ModelHashes& h) {
  std::string out(kMagic);
  PutU64(&out, h.identity.size);
  PutDigest(&out, h.identity.header);
  PutU64(&out, static_cast<uint64_t>(h.mtime_ns));
  PutU64(&out, kPieceBytes);
  PutU64(&out, h.pieces.size());
  for (const PieceHash& p : h.pieces) {
    PutU64(&out, p.range.offset);
    PutU64(&out, p.range.size);
    PutDigest(&out, p.digest);
  }
  PutDigest(&out, Sha256(out.data(), out.size()));
  return out;
}

absl::StatusOr<ModelHashes> ParseModelHashes(absl::string_view bytes) {
  if (bytes.size() < kMagic.size() || bytes.substr(0, kMagic.size()) != kMagic) {
    return absl::DataLossError("not a .tghash file (bad magic; written by another version?)");
  }
  if (bytes.size() < kFixedBytes + kSha256Bytes) {
    return absl::DataLossError(
        absl::StrFormat("truncated: %d bytes, a .tghash file has at least %d", bytes.size(),
                        kFixedBytes + kSha256Bytes));
  }
  Reader r(bytes.substr(kMagic.size()));
  ModelHashes h;
  h.identity.size = r.U64();
  h.identity.header = r.Digest();
  h.mtime_ns = static_cast<int64_t>(r.U64());
  const uint64_t piece_bytes = r.U64();
  const uint64_t count = r.U64();
  const uint64_t room = (bytes.size() - kFixedBytes - kSha256Bytes) / kPieceRecordBytes;
  if (count > room || kFixedBytes + count * kPieceRecordBytes + kSha256Bytes != bytes.size()) {
    return absl::DataLossError(absl::StrFormat(
        "truncated or corrupt: %d bytes, but it announces %d pieces (%d bytes)", bytes.size(),
        count, kFixedBytes + count * kPieceRecordBytes + kSha256Bytes));
  }
  const size_t body = bytes.size() - kSha256Bytes;
  Reader tail(bytes.substr(body));
  if (Sha256(bytes.data(), body) != tail.Digest()) {
    return absl::DataLossError("corrupt: its checksum does not match its contents");
  }
  if (piece_bytes != kPieceBytes) {
    return absl::DataLossError(
        absl::StrFormat("written with %d-byte pieces, this version uses %d (re-run tg-gguf hash)",
                        piece_bytes, kPieceBytes));
  }
  h.pieces.resize(count);
  for (PieceHash& p : h.pieces) {
    p.range.offset = r.U64();
    p.range.size = r.U64();
    p.digest = r.Digest();
  }
  return h;
}

absl::StatusOr<ModelHashes> ReadModelHashes(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::string bytes;
  char chunk[1 << 16];
  ssize_t n;
  while ((n = read(fd, chunk, sizeof(chunk))) > 0) bytes.append(chunk, static_cast<size_t>(n));
  const int err = errno;
  close(fd);
  if (n < 0)
    return absl::UnavailableError(absl::StrCat(path, ": cannot read: ", std::strerror(err)));
  absl::StatusOr<ModelHashes> h = ParseModelHashes(bytes);
  if (!h.ok()) return absl::DataLossError(absl::StrCat(path, ": ", h.status().message()));
  return h;
}

absl::Status WriteModelHashes(const std::string& path, const ModelHashes& hashes) {
  const std::string bytes = SerializeModelHashes(hashes);
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) {
      std::remove(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status CheckModelHashes(const ModelHashes& h, const ModelIdentity& identity, int64_t mtime_ns,
                              absl::Span<const FileRange> pieces) {
  if (h.identity != identity) {
    return absl::FailedPreconditionError(absl::StrCat("it describes another file (",
                                                      Describe(h.identity), "; this one has ",
                                                      Describe(identity), ")"));
  }
  if (h.mtime_ns != mtime_ns) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the file was modified since it was hashed (mtime %d ns then, %d ns now)",
                        h.mtime_ns, mtime_ns));
  }
  bool same = h.pieces.size() == pieces.size();
  for (size_t i = 0; same && i < pieces.size(); ++i) same = h.pieces[i].range == pieces[i];
  if (!same) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "its %d pieces are not the file's %d tensor pieces", h.pieces.size(), pieces.size()));
  }
  return absl::OkStatus();
}

}  // namespace tg::rpc
