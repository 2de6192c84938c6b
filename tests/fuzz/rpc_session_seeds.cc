// rpc_session_fuzz_seeds DIR: writes the seed corpus of rpc_session_fuzz, a few valid command
// sequences (length-prefixed serialized SessionRequests; handles are 1, 2, ... as the fuzz
// session uses predictable handles): alloc/write/read/free, a MUL_MAT + ADD compute run twice
// through the graph cache, GET_ROWS and SET_ROWS graphs with bad indices, and copies,
// memsets, grants and cache stats between two devices, and batches.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/server_test_util.h"

namespace {

namespace pb = ::tensorgrid::v1;
using tg::server::testing::AllocRequest;
using tg::server::testing::FreeRequest;
using tg::server::testing::MatMulAdd;
using tg::server::testing::ReadRequest;
using tg::server::testing::RowsCompute;
using tg::server::testing::WriteRequest;

void Append(std::string* out, const pb::SessionRequest& r) {
  const std::string bytes = r.SerializeAsString();
  const uint32_t len = static_cast<uint32_t>(bytes.size());
  out->append(reinterpret_cast<const char*>(&len), 4);
  out->append(bytes);
}

bool WriteSeed(const std::filesystem::path& dir, const char* name,
               const std::vector<pb::SessionRequest>& requests) {
  std::string data;
  for (const auto& r : requests) Append(&data, r);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  return static_cast<bool>(out);
}

}  // namespace

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
  if (!ok) {
    std::fprintf(stderr, "rpc_session_fuzz_seeds: cannot write into %s\n", dir.c_str());
    return 1;
  }
  std::printf("rpc_session_fuzz_seeds: 6 seeds in %s\n", dir.c_str());
  return 0;
}
