// rpc_session_fuzz_seeds DIR: writes the seed corpus of rpc_session_fuzz, a few command
// sequences in its record format (see rpc_session_fuzz.cc; handles are 1, 2, ... as the fuzz
// session uses predictable handles): alloc/write/read/free, a MUL_MAT + ADD compute run twice
// through the graph cache, GET_ROWS and SET_ROWS graphs with bad indices, SAMPLE with good
// and out-of-range parameters, and copies, memsets, grants and cache stats between two
// devices, batches, and 2D rows (WriteRows, ReadRows, good and malformed); and Upload streams: with
// a hash (stored, then served from the cache on both devices, and one too large to keep),
// without one (with session commands and a free in the middle), and refused ones (truncated,
// oversized, bad or malformed hash, out of range, unknown buffer or session, a chunk first,
// a header where a chunk belongs); and model-file loads: OpenModelFile of the fuzzer's model
// (tests/fuzz/fuzz_model_file.h) and uploads of its pieces answered from the file, by handle
// and offset or by hash alone, next to names outside the directory, wrong identities, wrong
// offsets and digests, and handles never opened.
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/server_testing.h"
#include "tests/fuzz/fuzz_model_file.h"

namespace {

namespace pb = ::tensorgrid::v1;
using tg::server::testing::AllocRequest;
using tg::server::testing::FreeRequest;
using tg::server::testing::MatMulAdd;
using tg::server::testing::ReadRequest;
using tg::server::testing::ReadRowsRequest;
using tg::server::testing::RowsCompute;
using tg::server::testing::RowsOf;
using tg::server::testing::SampleCompute;
using tg::server::testing::SampleSlots;
using tg::server::testing::Sha256Bytes;
using tg::server::testing::UploadChunk;
using tg::server::testing::UploadHeaderMessage;
using tg::server::testing::WriteRequest;
using tg::server::testing::WriteRowsRequest;

// rpc_session_fuzz.cc's record kinds: the top bit of the length word marks an upload record,
// bit 30 a peer's delivery of pushed pieces.
constexpr uint32_t kUploadRecord = 0x80000000u;
constexpr uint32_t kDeliverRecord = 0x40000000u;

// A seed's bytes, record by record.
class Seed {
 public:
  Seed& Add(const pb::SessionRequest& r) { return Record(0, r.SerializeAsString()); }
  Seed& Upload(const pb::UploadMessage& m) { return Record(kUploadRecord, m.SerializeAsString()); }
  // The end of the open Upload stream (the client's WritesDone).
  Seed& EndUpload() { return Record(kUploadRecord, ""); }
  Seed& Deliver(const pb::PeerDeliverRequest& d) {
    return Record(kDeliverRecord, d.SerializeAsString());
  }
  bool Write(const std::filesystem::path& dir, const char* name) const {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
    return static_cast<bool>(out);
  }

 private:
  Seed& Record(uint32_t kind, const std::string& payload) {
    const uint32_t word = kind | static_cast<uint32_t>(payload.size());
    bytes_.append(reinterpret_cast<const char*>(&word), 4);
    bytes_.append(payload);
    return *this;
  }
  std::string bytes_;
};

bool WriteSeed(const std::filesystem::path& dir, const char* name,
               const std::vector<pb::SessionRequest>& requests) {
  Seed seed;
  for (const auto& r : requests) seed.Add(r);
  return seed.Write(dir, name);
}

std::string Pattern(size_t n, char first) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(first + i % 23);
  return s;
}

pb::SessionRequest PushRequest(uint64_t id, uint64_t buffer, uint64_t offset, uint64_t size) {
  pb::SessionRequest r;
  r.set_id(id);
  r.mutable_peer_push()->set_endpoint("127.0.0.1:1");
  pb::PushPiece* piece = r.mutable_peer_push()->add_pieces();
  piece->set_buffer(buffer);
  piece->set_offset(offset);
  piece->set_size(size);
  piece->set_grant("buffer:2");
  piece->set_tag(1);
  return r;
}

pb::SessionRequest AwaitRequest(uint64_t id, uint64_t tag, uint64_t buffer, uint64_t offset,
                                uint64_t size) {
  pb::SessionRequest r;
  r.set_id(id);
  pb::AwaitPush* a = r.mutable_await_push();
  a->set_endpoint("127.0.0.1:1");
  a->set_tag(tag);
  a->set_dst_buffer(buffer);
  a->set_dst_offset(offset);
  a->set_size(size);
  return r;
}

void AddPiece(pb::PeerDeliverRequest* d, const char* grant, uint64_t tag, std::string data) {
  pb::DeliveredPiece* p = d->add_pieces();
  p->set_grant(grant);
  p->set_tag(tag);
  p->set_data(std::move(data));
}

// Pushes: a PeerPush (its checks; no peer to send to), pieces delivered under the grant of
// buffer 2 and awaited there (taken; of the wrong size; never delivered; into a buffer
// without a grant), a tag delivered twice and a grant nobody made.
bool WritePushSeed(const std::filesystem::path& dir) {
  pb::PeerDeliverRequest first, again, stranger;
  AddPiece(&first, "buffer:2", 1, Pattern(64, 'p'));
  AddPiece(&first, "buffer:2", 2, Pattern(32, 'q'));
  AddPiece(&again, "buffer:2", 4, Pattern(8, 'r'));
  AddPiece(&again, "buffer:2", 4, Pattern(8, 's'));
  AddPiece(&stranger, "00000000000000000000000000000000", 5, Pattern(8, 't'));
  pb::SessionRequest grant;
  grant.set_id(4);
  grant.mutable_grant_peer_read()->set_buffer(2);
  Seed seed;
  seed.Add(AllocRequest(1, 0, 256))
      .Add(AllocRequest(2, 1, 256))
      .Add(WriteRequest(3, 1, 0, Pattern(64, 'a')))
      .Add(grant)
      .Add(PushRequest(5, 1, 0, 64))
      .Add(PushRequest(6, 1, 250, 64))
      .Deliver(first)
      .Add(AwaitRequest(7, 1, 2, 16, 64))
      .Add(ReadRequest(8, 2, 16, 64))
      .Add(AwaitRequest(9, 2, 2, 0, 64))
      .Add(AwaitRequest(10, 3, 2, 0, 8))
      .Add(AwaitRequest(11, 1, 1, 0, 8))
      .Deliver(again)
      .Deliver(stranger)
      .Add(AwaitRequest(12, 4, 2, 0, 8))
      .Add(AwaitRequest(13, 5, 2, 0, 8));
  return seed.Write(dir, "push_await");
}

// Hashed uploads: a miss stored in the cache, then hits on both devices; a blob larger than
// the fuzz cache is taken but not kept.
bool WriteUploadCacheSeed(const std::filesystem::path& dir) {
  const std::string d = Pattern(40, 'a');
  const std::string big = Pattern(1500, 'A');
  Seed seed;
  seed.Add(AllocRequest(1, 0, 2048))
      .Upload(UploadHeaderMessage("fuzz", 1, 16, d.size(), Sha256Bytes(d)))
      .Upload(UploadChunk(d.substr(0, 25)))
      .Upload(UploadChunk(d.substr(25)))
      .EndUpload()
      .Upload(UploadHeaderMessage("fuzz", 1, 100, d.size(), Sha256Bytes(d)))  // have it.
      .Upload(UploadChunk("dropped: the stream is over"))
      .Add(ReadRequest(2, 1, 0, 160))
      .Add(AllocRequest(3, 1, 64))
      .Upload(UploadHeaderMessage("fuzz", 2, 8, d.size(), Sha256Bytes(d)))
      .Add(ReadRequest(4, 2, 0, 64))
      .Upload(UploadHeaderMessage("fuzz", 1, 200, big.size(), Sha256Bytes(big)))
      .Upload(UploadChunk(big.substr(0, 1000)))
      .Upload(UploadChunk(big.substr(1000)))
      .EndUpload()
      .Add(ReadRequest(5, 1, 1690, 20));
  return seed.Write(dir, "upload_cache");
}

// Uploads without a hash; session commands (a write into the range, a free) run in the
// middle of the second, which the end of the input finishes.
bool WriteUploadPlainSeed(const std::filesystem::path& dir) {
  Seed seed;
  seed.Add(AllocRequest(1, 0, 128))
      .Upload(UploadHeaderMessage("fuzz", 1, 8, 12))
      .Upload(UploadChunk("hello "))
      .Upload(UploadChunk("upload"))
      .EndUpload()
      .Add(ReadRequest(2, 1, 0, 24))
      .Upload(UploadHeaderMessage("fuzz", 1, 0, 64))
      .Upload(UploadChunk(Pattern(32, '0')))
      .Add(WriteRequest(3, 1, 40, "meanwhile"))
      .Add(FreeRequest(4, 1))
      .Upload(UploadChunk(Pattern(32, 'k')));
  return seed.Write(dir, "upload_plain");
}

// Uploads the sink refuses, each followed by one it takes.
bool WriteUploadErrorsSeed(const std::filesystem::path& dir) {
  const std::string d = Pattern(32, 'q');
  Seed seed;
  seed.Upload(UploadChunk("a chunk before any header"))
      .Add(AllocRequest(1, 0, 64))
      .Upload(UploadHeaderMessage("fuzz", 1, 0, d.size(), Sha256Bytes(d)))  // truncated.
      .Upload(UploadChunk(d.substr(0, 16)))
      .EndUpload()
      .Upload(UploadHeaderMessage("fuzz", 1, 0, 8))  // oversized.
      .Upload(UploadChunk("123456"))
      .Upload(UploadChunk("789abc"))
      .Upload(UploadHeaderMessage("fuzz", 1, 0, 4, Sha256Bytes("abcd")))  // bad hash.
      .Upload(UploadChunk("abce"))
      .EndUpload()
      .Upload(UploadHeaderMessage("fuzz", 1, 0, 4, "short"))  // not a SHA-256.
      .Upload(UploadHeaderMessage("fuzz", 1, 60, 8))          // out of range.
      .Upload(UploadHeaderMessage("fuzz", 1, UINT64_MAX - 2, 4))
      .Upload(UploadHeaderMessage("fuzz", 99, 0, 4))  // no such buffer.
      .Upload(UploadHeaderMessage("other", 1, 0, 4))  // no such session.
      .Upload(UploadHeaderMessage("fuzz", 1, 0, 4))   // a header where a chunk belongs.
      .Upload(UploadHeaderMessage("fuzz", 1, 0, 4))
      .Upload(UploadHeaderMessage("fuzz", 1, 56, 8, Sha256Bytes("fits ok!")))
      .Upload(UploadChunk("fits ok!"))
      .EndUpload()
      .Add(ReadRequest(2, 1, 0, 64));
  return seed.Write(dir, "upload_errors");
}

}  // namespace

pb::SessionRequest OpenModelFile(uint64_t id, const std::string& name, uint64_t size,
                                 const std::string& header_sha256) {
  pb::SessionRequest r;
  r.set_id(id);
  r.mutable_open_model_file()->set_name(name);
  r.mutable_open_model_file()->set_size(size);
  r.mutable_open_model_file()->set_header_sha256(header_sha256);
  return r;
}

pb::UploadMessage PieceHeader(uint64_t buffer, uint64_t offset, uint64_t size, std::string sha256,
                              uint64_t model_file, uint64_t file_offset) {
  pb::UploadMessage m = UploadHeaderMessage("fuzz", buffer, offset, size, std::move(sha256));
  m.mutable_header()->set_model_file(model_file);
  m.mutable_header()->set_file_offset(file_offset);
  return m;
}

bool WriteModelFileSeed(const std::filesystem::path& dir) {
  const tg::fuzz::FuzzModelFile f = tg::fuzz::MakeFuzzModelFile();
  const uint64_t size = f.bytes.size();
  const std::string header = f.HeaderSha256();
  const auto& t = f.tensors;
  Seed seed;
  seed.Add(AllocRequest(1, 0, 512))
      .Add(OpenModelFile(2, "", size, header))  // handle 1: the only indexed file.
      .Upload(PieceHeader(1, 0, t[0].size, f.PieceSha256(0), 1, t[0].offset))  // from the file.
      .Upload(PieceHeader(1, 64, t[1].size, f.PieceSha256(1), 0, 0))           // by its hash alone.
      .Upload(PieceHeader(1, 256, t[1].size, f.PieceSha256(1), 1, t[0].offset))  // wrong offset.
      .Upload(UploadChunk(f.bytes.substr(t[1].offset, t[1].size)))
      .EndUpload()
      .Upload(PieceHeader(1, 0, t[0].size, f.PieceSha256(1), 1, t[0].offset))  // wrong digest.
      .Upload(UploadChunk(f.bytes.substr(t[0].offset, t[0].size)))
      .EndUpload()
      .Upload(PieceHeader(1, 0, t[0].size, f.PieceSha256(0), 9, t[0].offset))  // never opened.
      .Add(OpenModelFile(3, "model.gguf", size, header))
      .Add(OpenModelFile(4, "../model.gguf", size, header))
      .Add(OpenModelFile(5, "/etc/passwd", size, header))
      .Add(OpenModelFile(6, "", size + 1, header))
      .Add(OpenModelFile(7, "", size, "short"))
      .Add(ReadRequest(8, 1, 0, 256));
  return seed.Write(dir, "model_file");
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rpc_session_fuzz_seeds DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  bool ok = true;
  ok &= WriteSeed(dir, "alloc_write_read_free",
                  {AllocRequest(1, 0, 256), WriteRequest(2, 1, 8, "hello fuzzer"),
                   ReadRequest(3, 1, 0, 32), FreeRequest(4, 1), ReadRequest(5, 1, 0, 4)});
  MatMulAdd mm(1);
  ok &= WriteSeed(dir, "compute_cached",
                  {AllocRequest(1, 0, MatMulAdd::kBufferBytes), mm.Compute(2, 1, 0, 77, true),
                   mm.Compute(3, 1, 0, 77, false), mm.Compute(4, 1, 0, 78, false),
                   FreeRequest(5, 1), mm.Compute(6, 1, 0, 77, false)});
  ok &= WriteSeed(dir, "get_rows_bad_index",
                  {AllocRequest(1, 0, 512), RowsCompute(2, 1, false, 1, 5)});
  ok &= WriteSeed(dir, "set_rows_bad_index",
                  {AllocRequest(1, 0, 512), RowsCompute(2, 1, true, 1, 5)});
  {
    std::vector<pb::SessionRequest> rs = {AllocRequest(1, 0, 128), AllocRequest(2, 1, 128),
                                          WriteRequest(3, 1, 0, "0123456789")};
    pb::SessionRequest c;
    c.set_id(4);
    c.mutable_copy()->mutable_src()->set_buffer(1);
    c.mutable_copy()->mutable_src()->set_offset(2);
    c.mutable_copy()->mutable_src()->set_size(6);
    c.mutable_copy()->set_dst_buffer(2);
    c.mutable_copy()->set_dst_offset(100);
    rs.push_back(c);
    pb::SessionRequest m;
    m.set_id(5);
    m.mutable_memset()->mutable_range()->set_buffer(2);
    m.mutable_memset()->mutable_range()->set_offset(4);
    m.mutable_memset()->mutable_range()->set_size(8);
    m.mutable_memset()->set_value(0xab);
    rs.push_back(m);
    pb::SessionRequest cl;
    cl.set_id(6);
    cl.mutable_clear_buffer()->set_buffer(1);
    cl.mutable_clear_buffer()->set_value(3);
    rs.push_back(cl);
    pb::SessionRequest g;
    g.set_id(7);
    g.mutable_grant_peer_read()->set_buffer(2);
    rs.push_back(g);
    pb::SessionRequest st;
    st.set_id(8);
    st.mutable_cache_stats();
    rs.push_back(st);
    rs.push_back(ReadRequest(9, 2, 96, 32));
    rs.push_back(FreeRequest(10, 2));
    ok &= WriteSeed(dir, "copy_memset_grant", rs);
  }
  {
    // Decode steps in a batch (the compute twice, then a read of its output), and a batch
    // inside a batch.
    pb::SessionRequest batch;
    batch.set_id(0);
    *batch.mutable_batch()->add_commands() = mm.Compute(3, 1, 0, 77, true);
    *batch.mutable_batch()->add_commands() = mm.Compute(4, 1, 0, 77, false);
    *batch.mutable_batch()->add_commands() = ReadRequest(5, 1, 0, 16);
    pb::SessionRequest nested;
    nested.set_id(6);
    *nested.mutable_batch()->add_commands() = batch;
    ok &= WriteSeed(
        dir, "batch",
        {AllocRequest(1, 0, MatMulAdd::kBufferBytes), WriteRequest(2, 1, 0, "x"), batch, nested});
  }
  // 2D rows: a view written and read back on both devices, then rows past the end,
  // overlapping rows, a byte count that does not match and a span that overflows.
  ok &= WriteSeed(
      dir, "rows",
      {AllocRequest(1, 0, 256), AllocRequest(2, 1, 256),
       WriteRowsRequest(3, RowsOf(1, 8, 24, 4, 64), std::string(96, 'r')),
       ReadRowsRequest(4, RowsOf(1, 8, 24, 4, 64)),
       WriteRowsRequest(5, RowsOf(2, 40, 24, 4, 64), std::string(96, 's')),
       ReadRowsRequest(6, RowsOf(2, 0, 16, 16, 16)), ReadRowsRequest(7, RowsOf(1, 41, 24, 4, 64)),
       WriteRowsRequest(8, RowsOf(1, 0, 32, 3, 16), std::string(96, 't')),
       WriteRowsRequest(9, RowsOf(1, 0, 8, 2, 16), std::string(15, 'u')),
       ReadRowsRequest(10, RowsOf(1, 8, 2, 3, UINT64_MAX / 2)), FreeRequest(11, 2)});
  {
    // A draw with a repetition penalty, the greedy case, and a top_p outside [0, 1].
    std::array<int32_t, 7> bad = SampleSlots(0.8f, 1.0f);
    bad[2] = tg::server::testing::F32Bits(2.0f);
    ok &= WriteSeed(dir, "sample",
                    {AllocRequest(1, 0, 512), SampleCompute(2, 1, SampleSlots(0.8f, 1.3f)),
                     SampleCompute(3, 1, SampleSlots(0.0f, 1.0f)), SampleCompute(4, 1, bad)});
  }
  ok &= WritePushSeed(dir);
  ok &= WriteUploadCacheSeed(dir);
  ok &= WriteUploadPlainSeed(dir);
  ok &= WriteUploadErrorsSeed(dir);
  ok &= WriteModelFileSeed(dir);
  if (!ok) {
    std::fprintf(stderr, "rpc_session_fuzz_seeds: cannot write into %s\n", dir.c_str());
    return 1;
  }
  std::printf("rpc_session_fuzz_seeds: 13 seeds in %s\n", dir.c_str());
  return 0;
}
