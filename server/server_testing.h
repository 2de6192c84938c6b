// Helpers shared by the server tests: building GraphDesc messages by hand, session command
// and upload message builders, and the small MUL_MAT + ADD graph whose result is checked against a
// naive loop.
#ifndef TENSORGRID_SERVER_SERVER_TESTING_H_
#define TENSORGRID_SERVER_SERVER_TESTING_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backends/register_builtin.h"
#include "core/dtype.h"
#include "core/op.h"
#include "core/registry.h"
#include "core/tensor.h"
#include "proto/content_hash.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server::testing {

namespace pb = ::tensorgrid::v1;

// Reply codes as the session writes them (SessionReply.code: an absl::StatusCode).
inline constexpr int kOk = 0;
inline constexpr int kInvalid = static_cast<int>(absl::StatusCode::kInvalidArgument);
inline constexpr int kNotFound = static_cast<int>(absl::StatusCode::kNotFound);
inline constexpr int kExhausted = static_cast<int>(absl::StatusCode::kResourceExhausted);
inline constexpr int kPrecondition = static_cast<int>(absl::StatusCode::kFailedPrecondition);
inline constexpr int kUnimplemented = static_cast<int>(absl::StatusCode::kUnimplemented);

// Two CPU devices (CPU0, CPU1); must run before the registry is first used.
inline std::vector<Device*> TwoCpuDevices() {
  setenv("TG_CPU_DEVICES", "2", 1);
  if (!RegisterBuiltinBackends().ok()) return {};
  std::vector<Device*> out;
  for (Device* d : Registry::Get().devices()) {
    if (d->type() == DeviceType::kCpu) out.push_back(d);
  }
  return out;
}

// Builds a GraphDesc tensor by tensor (ids 1..n in order).
class DescBuilder {
 public:
  // A contiguous tensor; returns its id.
  uint32_t Add(DType type, std::array<int64_t, 4> ne, Op op = Op::kNone,
               std::vector<uint32_t> src = {}, uint64_t buffer = 0, uint64_t offset = 0) {
    pb::TensorDesc* t = desc_.add_tensors();
    t->set_id(desc_.tensors_size());
    t->set_type(static_cast<uint32_t>(type));
    Tensor probe;
    probe.type = type;
    for (int i = 0; i < 4; ++i) probe.ne[i] = ne[i];
    SetContiguousStrides(&probe);
    for (int i = 0; i < 4; ++i) {
      t->add_ne(ne[i]);
      t->add_nb(probe.nb[i]);
    }
    t->set_op(static_cast<uint32_t>(op));
    for (uint32_t s : src) t->add_src(s);
    t->set_buffer(buffer);
    t->set_offset(offset);
    t->set_name(absl::StrCat("t", t->id()));
    if (op != Op::kNone) desc_.add_nodes(t->id());
    return t->id();
  }
  pb::TensorDesc& At(uint32_t id) { return *desc_.mutable_tensors(id - 1); }
  pb::GraphDesc& desc() { return desc_; }

 private:
  pb::GraphDesc desc_;
};

inline std::vector<float> Floats(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>((x >> 8) % 2001) / 1000.0f - 1.0f;
  }
  return v;
}

inline std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

inline std::vector<float> ToFloats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

// out[M, N] = A[K, M] x X[K, N] + B[M, N], all f32, in one buffer at 64-aligned offsets:
// A at 0, X at kXOff, B at kBOff, MUL_MAT result at kMmOff, output at kOutOff.
struct MatMulAdd {
  static constexpr int64_t K = 8, M = 4, N = 3;
  static constexpr uint64_t kAOff = 0, kXOff = 256, kBOff = 512, kMmOff = 768, kOutOff = 1024;
  static constexpr uint64_t kBufferBytes = 2048;
  std::vector<float> a, x, b;

  explicit MatMulAdd(uint32_t seed)
      : a(Floats(K * M, seed)), x(Floats(K * N, seed + 1)), b(Floats(M * N, seed + 2)) {}

  pb::GraphDesc Graph(uint64_t buffer) const {
    DescBuilder g;
    const uint32_t ta = g.Add(DType::kF32, {K, M, 1, 1}, Op::kNone, {}, buffer, kAOff);
    const uint32_t tx = g.Add(DType::kF32, {K, N, 1, 1}, Op::kNone, {}, buffer, kXOff);
    const uint32_t tb = g.Add(DType::kF32, {M, N, 1, 1}, Op::kNone, {}, buffer, kBOff);
    const uint32_t mm = g.Add(DType::kF32, {M, N, 1, 1}, Op::kMulMat, {ta, tx}, buffer, kMmOff);
    g.Add(DType::kF32, {M, N, 1, 1}, Op::kAdd, {mm, tb}, buffer, kOutOff);
    return g.desc();
  }

  std::vector<float> Expected() const {
    std::vector<float> out(M * N);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t m = 0; m < M; ++m) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(a[m * K + k]) * x[n * K + k];
        out[n * M + m] = static_cast<float>(acc) + b[n * M + m];
      }
    }
    return out;
  }

  // The Compute command: writes a, x, b as inputs and returns the output range.
  pb::SessionRequest Compute(uint64_t id, uint64_t buffer, uint32_t device, uint64_t key,
                             bool with_graph) const {
    pb::SessionRequest r;
    r.set_id(id);
    pb::Compute* c = r.mutable_compute();
    c->set_device(device);
    c->set_graph_key(key);
    if (with_graph) *c->mutable_graph() = Graph(buffer);
    for (auto [off, v] : {std::pair{kAOff, &a}, std::pair{kXOff, &x}, std::pair{kBOff, &b}}) {
      pb::WriteRange* w = c->add_inputs();
      w->set_buffer(buffer);
      w->set_offset(off);
      w->set_data(Bytes(*v));
    }
    pb::Range* out = c->add_outputs();
    out->set_buffer(buffer);
    out->set_offset(kOutOff);
    out->set_size(M * N * sizeof(float));
    return r;
  }
};

inline bool NearlyEqual(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > 1e-4f * (1.0f + std::fabs(want[i]))) return false;
  }
  return true;
}

inline pb::SessionRequest AllocRequest(uint64_t id, uint32_t device, uint64_t size) {
  pb::SessionRequest r;
  r.set_id(id);
  r.mutable_alloc_buffer()->set_device(device);
  r.mutable_alloc_buffer()->set_size(size);
  return r;
}

inline pb::SessionRequest FreeRequest(uint64_t id, uint64_t buffer) {
  pb::SessionRequest r;
  r.set_id(id);
  r.mutable_free_buffer()->set_buffer(buffer);
  return r;
}

inline pb::SessionRequest WriteRequest(uint64_t id, uint64_t buffer, uint64_t offset,
                                       std::string data) {
  pb::SessionRequest r;
  r.set_id(id);
  r.mutable_write()->set_buffer(buffer);
  r.mutable_write()->set_offset(offset);
  r.mutable_write()->set_data(std::move(data));
  return r;
}

inline pb::SessionRequest ReadRequest(uint64_t id, uint64_t buffer, uint64_t offset,
                                      uint64_t size) {
  pb::SessionRequest r;
  r.set_id(id);
  pb::Range* range = r.mutable_read()->mutable_range();
  range->set_buffer(buffer);
  range->set_offset(offset);
  range->set_size(size);
  return r;
}

// A WriteRows/ReadRows of `n_rows` rows of `row_size` bytes at `offset`, `stride` apart.
inline pb::Rows RowsOf(uint64_t buffer, uint64_t offset, uint64_t row_size, uint64_t n_rows,
                       uint64_t stride) {
  pb::Rows rows;
  rows.set_buffer(buffer);
  rows.set_offset(offset);
  rows.set_row_size(row_size);
  rows.set_n_rows(n_rows);
  rows.set_stride(stride);
  return rows;
}

inline pb::SessionRequest WriteRowsRequest(uint64_t id, const pb::Rows& rows, std::string data) {
  pb::SessionRequest r;
  r.set_id(id);
  *r.mutable_write_rows()->mutable_rows() = rows;
  r.mutable_write_rows()->set_data(std::move(data));
  return r;
}

inline pb::SessionRequest ReadRowsRequest(uint64_t id, const pb::Rows& rows) {
  pb::SessionRequest r;
  r.set_id(id);
  *r.mutable_read_rows()->mutable_rows() = rows;
  return r;
}

// The first message of an Upload stream; `sha256` is the raw digest or empty.
inline pb::UploadMessage UploadHeaderMessage(std::string session_id, uint64_t buffer,
                                             uint64_t offset, uint64_t size,
                                             std::string sha256 = "") {
  pb::UploadMessage m;
  pb::UploadHeader* h = m.mutable_header();
  h->set_session_id(std::move(session_id));
  h->set_buffer(buffer);
  h->set_offset(offset);
  h->set_size(size);
  h->set_sha256(std::move(sha256));
  return m;
}

inline pb::UploadMessage UploadChunk(std::string data) {
  pb::UploadMessage m;
  m.set_chunk(std::move(data));
  return m;
}

// The raw SHA-256 of `data`, as UploadHeader.sha256 carries it.
inline std::string Sha256Bytes(absl::string_view data) {
  const rpc::Sha256Digest d = rpc::Sha256(data.data(), data.size());
  return std::string(d.begin(), d.end());
}

// A Compute on `buffer` (256 bytes at least) of GET_ROWS (rows `row0`, `row1` of a 3x4 f32
// table at offset 0, indices at 128, result at 192) or, with set_rows, SET_ROWS (two rows
// at 64 written into the table at those rows); the indices are the Compute's input, and the
// first 64 bytes come back as its output. Indices out of [0, 3) fail when it runs.
inline pb::SessionRequest RowsCompute(uint64_t id, uint64_t buffer, bool set_rows, int32_t row0,
                                      int32_t row1) {
  DescBuilder g;
  pb::SessionRequest r;
  r.set_id(id);
  pb::Compute* c = r.mutable_compute();
  c->set_graph_key(set_rows ? 9 : 8);
  const uint32_t rows = g.Add(DType::kF32, {4, 3, 1, 1}, Op::kNone, {}, buffer, 0);
  const uint32_t src = g.Add(DType::kF32, {4, 2, 1, 1}, Op::kNone, {}, buffer, 64);
  const uint32_t idx = g.Add(DType::kI32, {2, 1, 1, 1}, Op::kNone, {}, buffer, 128);
  if (set_rows) {
    const uint32_t n = g.Add(DType::kF32, {4, 3, 1, 1}, Op::kSetRows, {rows, src, idx});
    g.At(n).set_view_src(rows);
  } else {
    g.Add(DType::kF32, {4, 2, 1, 1}, Op::kGetRows, {rows, idx}, buffer, 192);
  }
  *c->mutable_graph() = g.desc();
  const int32_t ids[2] = {row0, row1};
  pb::WriteRange* w = c->add_inputs();
  w->set_buffer(buffer);
  w->set_offset(128);
  w->set_data(std::string(reinterpret_cast<const char*>(ids), sizeof(ids)));
  pb::Range* out = c->add_outputs();
  out->set_buffer(buffer);
  out->set_size(64);
  return r;
}

// SAMPLE over logits [8, 2] at offset 0 of `buffer` (512 bytes at least), positions I32 [2]
// at 64, a window of 3 recent tokens at 128 and the two ids at 256; op_params as given
// (SampleParams' slots, see core/ops.h).
inline pb::GraphDesc SampleGraph(uint64_t buffer, const std::array<int32_t, 7>& params) {
  DescBuilder g;
  const uint32_t logits = g.Add(DType::kF32, {8, 2, 1, 1}, Op::kNone, {}, buffer, 0);
  const uint32_t pos = g.Add(DType::kI32, {2, 1, 1, 1}, Op::kNone, {}, buffer, 64);
  const uint32_t recent = g.Add(DType::kI32, {3, 1, 1, 1}, Op::kNone, {}, buffer, 128);
  const uint32_t out =
      g.Add(DType::kI32, {1, 2, 1, 1}, Op::kSample, {logits, pos, recent}, buffer, 256);
  g.At(out).set_op_params(params.data(), params.size() * sizeof(int32_t));
  return g.desc();
}

inline int32_t F32Bits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}

// temperature, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty `rp`, seed 7.
inline std::array<int32_t, 7> SampleSlots(float temperature, float rp) {
  return {F32Bits(temperature), 40, F32Bits(0.95f), F32Bits(0.05f), F32Bits(rp), 7, 0};
}

// A Compute of SampleGraph whose inputs are the logits (Floats(16, 3)), positions 5 and 6 and
// the window {2, -1, 99}; the two drawn ids come back as its output.
inline pb::SessionRequest SampleCompute(uint64_t id, uint64_t buffer,
                                        const std::array<int32_t, 7>& params) {
  pb::SessionRequest r;
  r.set_id(id);
  pb::Compute* c = r.mutable_compute();
  c->set_graph_key(10);
  *c->mutable_graph() = SampleGraph(buffer, params);
  const std::vector<float> logits = Floats(16, 3);
  const int32_t ints[5] = {5, 6, 2, -1, 99};
  for (auto [off, bytes, n] : {std::tuple{0, static_cast<const void*>(logits.data()), 64},
                               std::tuple{64, static_cast<const void*>(ints), 8},
                               std::tuple{128, static_cast<const void*>(ints + 2), 12}}) {
    pb::WriteRange* w = c->add_inputs();
    w->set_buffer(buffer);
    w->set_offset(off);
    w->set_data(std::string(static_cast<const char*>(bytes), n));
  }
  pb::Range* out = c->add_outputs();
  out->set_buffer(buffer);
  out->set_offset(256);
  out->set_size(8);
  return r;
}

// Runs alloc -> compute (MUL_MAT + ADD) -> check -> free through `handle`; returns an error
// describing the first thing that went wrong.
inline absl::Status RunMatMulAddCheck(
    const std::function<pb::SessionReply(const pb::SessionRequest&)>& handle, uint32_t seed,
    uint32_t device = 0) {
  pb::SessionReply r = handle(AllocRequest(1, device, MatMulAdd::kBufferBytes));
  if (r.code() != 0) return absl::InternalError(absl::StrCat("alloc: ", r.message()));
  const uint64_t buffer = r.alloc_buffer().buffer();
  MatMulAdd mm(seed);
  r = handle(mm.Compute(2, buffer, device, 1000 + seed, true));
  if (r.code() != 0) return absl::InternalError(absl::StrCat("compute: ", r.message()));
  if (r.compute().outputs_size() != 1) return absl::InternalError("no output");
  if (!NearlyEqual(ToFloats(r.compute().outputs(0)), mm.Expected())) {
    return absl::InternalError("wrong MUL_MAT + ADD result");
  }
  r = handle(FreeRequest(3, buffer));
  if (r.code() != 0) return absl::InternalError(absl::StrCat("free: ", r.message()));
  return absl::OkStatus();
}

// GET /metrics from 127.0.0.1:port over a plain socket, with `headers` (each line ending in
// \r\n): the HTTP response, or "" when nothing accepts the connection.
inline std::string ScrapeMetrics(int port, const std::string& headers = "") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n" + headers + "\r\n";
    (void)!write(fd, req.data(), req.size());
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  }
  close(fd);
  return out;
}

}  // namespace tg::server::testing

#endif  // TENSORGRID_SERVER_SERVER_TESTING_H_
