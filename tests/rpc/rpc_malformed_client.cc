// rpc_malformed_client: sends the malformed-request catalogue to a running rpc-server over
// real gRPC and checks each error code; rpc_malformed_test.py runs it while another client
// generates text on the same server. Prints one line per case; exit 0 when every case got
// its code and a valid MUL_MAT + ADD still computes correctly afterwards.
//
//   rpc_malformed_client HOST:PORT TOKEN_FILE [OUTSIDE_MODEL]
//
// With OUTSIDE_MODEL (a GGUF file outside the server's --model-dir, which holds a symlink
// "link.gguf" to it), the model-file cases run too: names outside the directory, the
// symlink out of it, malformed identities, upload headers naming handles never opened.
#include <grpcpp/grpcpp.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "client/connection.h"
#include "gguf/gguf_file.h"
#include "proto/model_identity.h"
#include "proto/protocol.h"
#include "server/server_testing.h"

namespace {

namespace pb = tensorgrid::v1;
using tg::DType;
using tg::Op;
using tg::server::testing::AllocRequest;
using tg::server::testing::DescBuilder;
using tg::server::testing::FreeRequest;
using tg::server::testing::ReadRequest;
using tg::server::testing::ReadRowsRequest;
using tg::server::testing::RowsOf;
using tg::server::testing::WriteRequest;
using tg::server::testing::WriteRowsRequest;

int failures = 0;

void Expect(const char* name, absl::StatusCode want, const absl::Status& got) {
  const bool ok = got.code() == want;
  if (!ok) ++failures;
  std::printf("%-34s want %-20s got %-20s %s  %s\n", name, absl::StatusCodeToString(want).c_str(),
              absl::StatusCodeToString(got.code()).c_str(), ok ? "ok  " : "FAIL",
              std::string(got.message()).substr(0, 110).c_str());
}

absl::Status Status(const absl::StatusOr<pb::SessionReply>& r) { return r.status(); }

pb::SessionRequest ComputeOf(pb::GraphDesc desc, uint64_t key) {
  pb::SessionRequest r;
  r.mutable_compute()->set_graph_key(key);
  *r.mutable_compute()->mutable_graph() = std::move(desc);
  return r;
}

// OpenModelFile with this name and identity.
absl::Status OpenModelFile(tg::rpc::Connection& c, const std::string& name, uint64_t size,
                           const std::string& header_sha256) {
  pb::SessionRequest r;
  r.mutable_open_model_file()->set_name(name);
  r.mutable_open_model_file()->set_size(size);
  r.mutable_open_model_file()->set_header_sha256(header_sha256);
  return c.Call(r).status();
}

// The model-file catalogue: the server must never open what a client names.
void ModelFileCases(tg::rpc::Connection& s, uint64_t buffer, const std::string& outside) {
  auto file = tg::GgufFile::Open(outside);
  if (!file.ok()) {
    std::fprintf(stderr, "cannot read %s: %s\n", outside.c_str(),
                 std::string(file.status().message()).c_str());
    ++failures;
    return;
  }
  const uint64_t data_start = (*file)->data_section() - (*file)->bytes().data();
  const tg::rpc::ModelIdentity id =
      tg::rpc::IdentityOf((*file)->bytes().subspan(0, data_start), (*file)->file_size());
  const std::string sha(reinterpret_cast<const char*>(id.header.data()), id.header.size());
  Expect("model file: the outside file itself", absl::StatusCode::kPermissionDenied,
         OpenModelFile(s, outside, id.size, sha));
  Expect("model file: /etc/passwd", absl::StatusCode::kPermissionDenied,
         OpenModelFile(s, "/etc/passwd", id.size, sha));
  Expect("model file: ../ out of the dir", absl::StatusCode::kPermissionDenied,
         OpenModelFile(s, "../" + outside.substr(outside.rfind('/') + 1), id.size, sha));
  Expect("model file: symlink out of the dir", absl::StatusCode::kNotFound,
         OpenModelFile(s, "link.gguf", id.size, sha));
  Expect("model file: its identity, no name", absl::StatusCode::kNotFound,
         OpenModelFile(s, "", id.size, sha));
  Expect("model file: 5-byte header digest", absl::StatusCode::kInvalidArgument,
         OpenModelFile(s, "", id.size, "12345"));
  tg::rpc::UploadJob job;  // a header naming a model-file handle this session never got.
  job.buffer = buffer;
  job.bytes = std::string(64, 'w');
  job.cacheable = true;
  job.model_file = 77;
  absl::Status queued = s.QueueUpload(std::move(job));
  Expect("upload: unopened model-file handle", absl::StatusCode::kNotFound,
         queued.ok() ? s.WaitUploads() : queued);
}

std::string ReadToken(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(ss.str()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: rpc_malformed_client HOST:PORT TOKEN_FILE [OUTSIDE_MODEL]\n");
    return 2;
  }
  const std::string endpoint = argv[1];
  tg::rpc::ClientOptions options;
  options.progress = false;
  options.token = ReadToken(argv[2]);

  // Authentication.
  {
    tg::rpc::ClientOptions none = options;
    none.token.clear();
    Expect("missing token", absl::StatusCode::kUnauthenticated,
           tg::rpc::Connection::Open(endpoint, none).status());
    tg::rpc::ClientOptions wrong = options;
    wrong.token = "not-the-token";
    Expect("wrong token", absl::StatusCode::kPermissionDenied,
           tg::rpc::Connection::Open(endpoint, wrong).status());
  }

  auto a = tg::rpc::Connection::Open(endpoint, options);
  auto b = tg::rpc::Connection::Open(endpoint, options);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "cannot connect: %s\n",
                 std::string((a.ok() ? b : a).status().message()).c_str());
    return 1;
  }
  tg::rpc::Connection& s = **a;
  auto alloc = [&](tg::rpc::Connection& c, uint64_t size) -> uint64_t {
    auto r = c.Call(AllocRequest(0, 0, size));
    return r.ok() ? r->alloc_buffer().buffer() : 0;
  };
  const uint64_t h = alloc(s, 4096);

  // Ranges.
  Expect("write past the end", absl::StatusCode::kInvalidArgument,
         Status(s.Call(WriteRequest(0, h, 4090, "0123456789"))));
  Expect("write at offset 2^64-2", absl::StatusCode::kInvalidArgument,
         Status(s.Call(WriteRequest(0, h, UINT64_MAX - 1, "01"))));
  Expect("read size past the end", absl::StatusCode::kInvalidArgument,
         Status(s.Call(ReadRequest(0, h, 8, 4096))));
  Expect("rows past the end", absl::StatusCode::kInvalidArgument,
         Status(s.Call(ReadRowsRequest(0, RowsOf(h, 200, 64, 16, 256)))));  // ends at 4104.
  Expect("overlapping rows", absl::StatusCode::kInvalidArgument,
         Status(s.Call(WriteRowsRequest(0, RowsOf(h, 0, 32, 2, 16), std::string(64, 'x')))));
  Expect("rows with the wrong byte count", absl::StatusCode::kInvalidArgument,
         Status(s.Call(WriteRowsRequest(0, RowsOf(h, 0, 32, 2, 64), std::string(63, 'x')))));
  Expect("rows whose span overflows", absl::StatusCode::kInvalidArgument,
         Status(s.Call(ReadRowsRequest(0, RowsOf(h, 8, 2, 3, UINT64_MAX / 2)))));

  // Tensors and graphs.
  {
    DescBuilder g;
    const uint32_t x = g.Add(DType::kF32, {4, 4, 1, 1}, Op::kNone, {}, h, 0);
    g.Add(DType::kF32, {4, 4, 1, 1}, Op::kAdd, {x, x}, h, 128);
    g.At(x).set_ne(1, int64_t{1} << 62);
    Expect("overflowing dims", absl::StatusCode::kInvalidArgument,
           Status(s.Call(ComputeOf(g.desc(), 11))));
  }
  {
    DescBuilder g;
    const uint32_t x = g.Add(DType::kF32, {4, 4, 1, 1}, Op::kNone, {}, h, 0);
    g.Add(DType::kF32, {4, 4, 1, 1}, Op::kAdd, {x, x}, h, 128);
    g.At(2).set_nb(1, 4);  // rows overlap: not what ADD's rule gives.
    Expect("wrong strides", absl::StatusCode::kInvalidArgument,
           Status(s.Call(ComputeOf(g.desc(), 12))));
  }
  {
    DescBuilder g;
    const uint32_t x = g.Add(DType::kF32, {4, 4, 1, 1}, Op::kNone, {}, h, 0);
    g.Add(DType::kF32, {4, 4, 1, 1}, Op::kAdd, {x, x}, h, 128);
    g.At(x).set_type(99);
    Expect("unknown dtype 99", absl::StatusCode::kInvalidArgument,
           Status(s.Call(ComputeOf(g.desc(), 13))));
  }
  {
    DescBuilder g;
    const uint32_t x = g.Add(DType::kF32, {4, 4, 1, 1}, Op::kNone, {}, h, 0);
    g.Add(DType::kF32, {4, 4, 1, 1}, Op::kAdd, {x, x}, h, 128);
    g.At(2).set_op(200);
    Expect("unknown op 200", absl::StatusCode::kInvalidArgument,
           Status(s.Call(ComputeOf(g.desc(), 14))));
  }
  {
    DescBuilder g;  // 2 = ADD(1, 3), 3 = ADD(2, 1): a cycle.
    const uint32_t x = g.Add(DType::kF32, {4, 4, 1, 1}, Op::kNone, {}, h, 0);
    g.Add(DType::kF32, {4, 4, 1, 1}, Op::kAdd, {x, 3}, h, 128);
    g.Add(DType::kF32, {4, 4, 1, 1}, Op::kAdd, {2, x}, h, 256);
    Expect("cyclic graph", absl::StatusCode::kInvalidArgument,
           Status(s.Call(ComputeOf(g.desc(), 15))));
  }
  {
    DescBuilder g;
    const uint32_t rows = g.Add(DType::kF32, {4, 3, 1, 1}, Op::kNone, {}, h, 0);
    const uint32_t idx = g.Add(DType::kI32, {2, 1, 1, 1}, Op::kNone, {}, h, 64);
    g.Add(DType::kF32, {4, 2, 1, 1}, Op::kGetRows, {rows, idx}, h, 128);
    pb::SessionRequest r = ComputeOf(g.desc(), 16);
    const int32_t ids[2] = {1, 7};
    pb::WriteRange* w = r.mutable_compute()->add_inputs();
    w->set_buffer(h);
    w->set_offset(64);
    w->set_data(std::string(reinterpret_cast<const char*>(ids), sizeof(ids)));
    Expect("GET_ROWS index out of range", absl::StatusCode::kInvalidArgument, Status(s.Call(r)));
  }

  {
    // SAMPLE is in the op table; parameters outside their ranges are refused by name.
    std::array<int32_t, 7> params = tg::server::testing::SampleSlots(0.8f, 1.0f);
    params[2] = tg::server::testing::F32Bits(1.5f);
    Expect("SAMPLE top_p 1.5", absl::StatusCode::kInvalidArgument,
           Status(s.Call(ComputeOf(tg::server::testing::SampleGraph(h, params), 17))));
    pb::SessionRequest good =
        tg::server::testing::SampleCompute(0, h, tg::server::testing::SampleSlots(0.8f, 1.3f));
    good.mutable_compute()->set_graph_key(18);
    Expect("SAMPLE with good parameters", absl::StatusCode::kOk, Status(s.Call(good)));
  }

  // Handles.
  const uint64_t other = alloc(**b, 256);
  Expect("another session's handle", absl::StatusCode::kNotFound,
         Status(s.Call(ReadRequest(0, other, 0, 4))));
  const uint64_t freed = alloc(s, 256);
  (void)s.Call(FreeRequest(0, freed));
  Expect("freed handle", absl::StatusCode::kNotFound, Status(s.Call(ReadRequest(0, freed, 0, 4))));
  Expect("made-up handle", absl::StatusCode::kNotFound,
         Status(s.Call(ReadRequest(0, 0x1234, 0, 4))));

  if (argc == 4) ModelFileCases(s, h, argv[3]);

  // A message over the server's limit, sent on a raw channel that allows it.
  {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(256 << 20);
    auto stub = pb::TensorGrid::NewStub(
        grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    ctx.AddMetadata(tg::rpc::kAuthMetadataKey, "Bearer " + options.token);
    auto stream = stub->Session(&ctx);
    pb::SessionReply started;
    stream->Read(&started);
    pb::SessionRequest big =
        WriteRequest(1, 1, 0, std::string(tg::rpc::kMaxMessageBytes + 1024, 'x'));
    stream->Write(big);
    pb::SessionReply reply;
    while (stream->Read(&reply)) {
    }
    grpc::Status st = stream->Finish();
    Expect("oversized message", absl::StatusCode::kResourceExhausted,
           absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message()));
  }

  // The same server still computes correctly for a new session and for this one.
  for (tg::rpc::Connection* c : {&s, b->get()}) {
    absl::Status st = tg::server::testing::RunMatMulAddCheck(
        [c](const pb::SessionRequest& r) {
          auto reply = c->Call(r);
          pb::SessionReply out;
          if (reply.ok()) return *reply;
          out.set_code(static_cast<int>(reply.status().code()));
          out.set_message(std::string(reply.status().message()));
          return out;
        },
        7);
    Expect("valid MUL_MAT + ADD afterwards", absl::StatusCode::kOk, st);
  }
  std::printf("%s\n",
              failures == 0 ? "all malformed requests refused with their codes" : "FAILURES");
  return failures == 0 ? 0 : 1;
}
