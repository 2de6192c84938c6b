// The backend conformance suite (issue 40, after IREE's hal/cts): one value-parameterised
// gtest suite that holds every device to the contract of core/backend.h (Buffer, Stream,
// Event), instantiated for CPU, a second virtual CPU, Vulkan0 (lavapipe in CI), a device of
// an rpc-server in this process, a META device over two CPUs, and CUDA0. A device that is
// not there skips every case, printing why. Each case quotes the sentence of core/backend.h
// it checks; tg-ops covers the ops, so one small graph is enough to prove a device runs
// graphs. Optional entries (events, CopyFrom, pushes) pass either by doing the work or by
// answering UNIMPLEMENTED without side effects, as their documented defaults do.
//
// Run one device with --gtest_filter='*/RPC_CPU'; ctest runs one entry per device
// (tests/conformance/CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "backends/register_builtin.h"
#include "client/connection.h"
#include "client/remote_device.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "core/registry.h"
#include "core/strided_range.h"
#include "meta/meta_device.h"
#include "meta/split_state.h"
#include "server/rpc_server.h"
#include "tests/lib/strided_reference.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

using ::tg::testing::BytePattern;

// ---------------------------------------------------------------------------------------
// The devices under test.

// One device under test and what keeps it alive. `peer` is a second device (of the same
// family where there is one) for copies and pushes between devices.
// rpc-servers on loopback (in-process), each exposing `device`, and a client family on
// each: the client side is closed before the servers.
class LoopbackServers {
 public:
  ~LoopbackServers() {
    families_.clear();
    for (auto& s : servers_) s->Shutdown(0);
  }
  // Starts one more server; its devices are appended to devices().
  absl::Status Start(Device* device) {
    server::ServerConfig config;
    config.port = 0;  // any free port.
    config.devices = {device};
    absl::StatusOr<std::unique_ptr<server::RpcServer>> server = server::RpcServer::Start(config);
    if (!server.ok()) return server.status();
    servers_.push_back(std::move(*server));
    rpc::ClientOptions options;
    options.progress = false;
    absl::StatusOr<std::unique_ptr<rpc::Connection>> connection =
        rpc::Connection::Open(servers_.back()->address(), options);
    if (!connection.ok()) return connection.status();
    families_.push_back(std::make_unique<rpc::RemoteFamily>(std::move(*connection)));
    for (Device* d : families_.back()->devices()) devices_.push_back(d);
    return absl::OkStatus();
  }
  const std::vector<Device*>& devices() const { return devices_; }

 private:
  std::vector<std::unique_ptr<server::RpcServer>> servers_;
  std::vector<std::unique_ptr<rpc::RemoteFamily>> families_;
  std::vector<Device*> devices_;
};

struct Backend {
  std::string skip;  // non-empty: the device is not here, and why.
  Device* device = nullptr;
  Device* peer = nullptr;
  // Owned pieces, destroyed in reverse order: the meta device before its CPUs, the client
  // families before their servers (LoopbackServers::Stop).
  std::unique_ptr<cpu::CpuFamily> cpus;
  std::vector<std::unique_ptr<cpu::CpuDevice>> own_cpus;
  std::unique_ptr<meta::MetaDevice> meta;
  std::unique_ptr<LoopbackServers> servers;
};

// Host threads for the virtual CPUs: two, the CI machines' core count.
constexpr int kVirtualCpuThreads = 2;

Device* RegistryCpu() {
  if (!RegisterBuiltinBackends().ok()) return nullptr;
  return Registry::Get().CpuDevice();
}

std::unique_ptr<Backend> MakeCpu() {
  auto b = std::make_unique<Backend>();
  b->device = RegistryCpu();
  if (b->device == nullptr) b->skip = "no CPU device registered";
  b->own_cpus.push_back(std::make_unique<cpu::CpuDevice>("CPU_PEER", "cpu-peer", 1));
  b->peer = b->own_cpus.back().get();
  return b;
}

// The second of two virtual CPUs (TG_CPU_DEVICES=2's CPU1), made here whatever the
// environment says.
std::unique_ptr<Backend> MakeCpuX2() {
  auto b = std::make_unique<Backend>();
  b->cpus = std::make_unique<cpu::CpuFamily>(2, kVirtualCpuThreads);
  b->device = b->cpus->devices().at(1);
  b->peer = b->cpus->devices().at(0);
  return b;
}

// Vulkan0 of the registry: lavapipe joins it with TG_VULKAN_CPU=1, which main() sets.
std::unique_ptr<Backend> MakeVulkan() {
  auto b = std::make_unique<Backend>();
  absl::StatusOr<Device*> d = RegisterBuiltinBackends().ok()
                                  ? Registry::Get().FindDevice("Vulkan0")
                                  : absl::StatusOr<Device*>(absl::NotFoundError(""));
  if (!d.ok()) {
#if defined(TG_CONFORMANCE_VULKAN)
    b->skip = "no Vulkan device (install mesa-vulkan-drivers for lavapipe; TG_VULKAN_CPU=1)";
#else
    b->skip = "this build has no Vulkan backend (TG_VULKAN=OFF)";
#endif
    return b;
  }
  b->device = *d;
  b->peer = RegistryCpu();
  return b;
}

// A device of a real rpc-server in this process (exposing the CPU), through the client;
// the peer is the device of a second server, so that pushes go between servers.
std::unique_ptr<Backend> MakeRpc() {
  auto b = std::make_unique<Backend>();
  Device* cpu = RegistryCpu();
  if (cpu == nullptr) {
    b->skip = "no CPU device for the rpc-server to expose";
    return b;
  }
  b->servers = std::make_unique<LoopbackServers>();
  for (int i = 0; i < 2; ++i) {
    if (absl::Status s = b->servers->Start(cpu); !s.ok()) {
      // Not a skip: the server is part of this build, so it must start.
      ADD_FAILURE() << "a loopback rpc-server: " << s;
      b->skip = absl::StrCat("the loopback rpc-server did not start: ", s.ToString());
      return b;
    }
  }
  b->device = b->servers->devices()[0];
  b->peer = b->servers->devices()[1];
  return b;
}

// META over two virtual CPUs of its own, cutting every tensor of two rows or more along
// dimension 1 in halves (so that reads and writes scatter and gather), the rest mirrored.
std::unique_ptr<Backend> MakeMeta() {
  auto b = std::make_unique<Backend>();
  b->cpus = std::make_unique<cpu::CpuFamily>(2, kVirtualCpuThreads);
  auto split = [](const Tensor& t) -> absl::StatusOr<meta::SplitState> {
    if (t.ne[1] < 2) return meta::SplitState::Mirrored();
    return meta::SplitState::Axis(
        1, meta::ProportionalRanges(t.ne[1], 1, std::vector<float>{0.5f, 0.5f}));
  };
  absl::StatusOr<std::unique_ptr<meta::MetaDevice>> m =
      meta::MetaDevice::Create(b->cpus->devices(), split);
  if (!m.ok()) {
    b->skip = absl::StrCat("META over two CPUs: ", m.status().ToString());
    return b;
  }
  b->meta = std::move(*m);
  b->device = b->meta.get();
  b->peer = RegistryCpu();
  return b;
}

std::unique_ptr<Backend> MakeCuda() {
  auto b = std::make_unique<Backend>();
  absl::StatusOr<Device*> d = RegisterBuiltinBackends().ok()
                                  ? Registry::Get().FindDevice("CUDA0")
                                  : absl::StatusOr<Device*>(absl::NotFoundError(""));
  if (!d.ok()) {
#if defined(TG_CONFORMANCE_CUDA)
    b->skip = "no CUDA device (no NVIDIA driver or GPU on this machine)";
#else
    b->skip = "this build has no CUDA backend (TG_CUDA=OFF)";
#endif
    return b;
  }
  b->device = *d;
  absl::StatusOr<Device*> second = Registry::Get().FindDevice("CUDA1");
  b->peer = second.ok() ? *second : RegistryCpu();
  return b;
}

const std::map<std::string, std::function<std::unique_ptr<Backend>()>>& Factories() {
  static const auto* factories =
      new std::map<std::string, std::function<std::unique_ptr<Backend>()>>{
          {"CPU", MakeCpu},     {"CPUx2", MakeCpuX2},     {"Vulkan0", MakeVulkan},
          {"RPC_CPU", MakeRpc}, {"META_CPUx2", MakeMeta}, {"CUDA0", MakeCuda},
      };
  return *factories;
}

// Each device is set up once per process (a Vulkan device and a server take a while) and
// torn down by the environment, after the last case.
class Backends : public ::testing::Environment {
 public:
  static Backend& Get(const std::string& name) {
    std::unique_ptr<Backend>& b = cache()[name];
    if (b == nullptr) b = Factories().at(name)();
    return *b;
  }
  void TearDown() override { cache().clear(); }

 private:
  static std::map<std::string, std::unique_ptr<Backend>>& cache() {
    static auto* c = new std::map<std::string, std::unique_ptr<Backend>>();
    return *c;
  }
};

// ---------------------------------------------------------------------------------------
// The fixture: buffers, tensors and streams of one case on the device under test.

size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

bool IsRangeError(const absl::Status& s) {
  return absl::IsOutOfRange(s) || absl::IsInvalidArgument(s);
}

std::vector<float> AsFloats(const std::vector<uint8_t>& bytes) {
  std::vector<float> f(bytes.size() / 4);
  std::memcpy(f.data(), bytes.data(), f.size() * 4);
  return f;
}

// Equal byte strings; otherwise the first differing byte and how many differ (a dump of
// both would bury the failure).
::testing::AssertionResult SameBytes(const std::vector<uint8_t>& got,
                                     const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " bytes, want " << want.size();
  }
  size_t first = got.size(), differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (differ++ == 0) first = i;
    }
  }
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << differ << " of " << got.size() << " bytes differ, the first at byte " << first << " ("
         << int(got[first]) << ", want " << int(want[first]) << ")";
}

class BackendConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    Backend& b = Backends::Get(GetParam());
    if (!b.skip.empty()) GTEST_SKIP() << GetParam() << ": " << b.skip;
    device_ = b.device;
    peer_ = b.peer;
    host_ = RegistryCpu();
    ASSERT_NE(device_, nullptr);
    ASSERT_NE(host_, nullptr);
    type_ = device_->default_buffer_type();
    ASSERT_NE(type_, nullptr);
  }

  void TearDown() override {
    streams_.clear();  // queued work first: buffers must outlive it.
    runs_.clear();
    buffers_.clear();
  }

  Buffer* NewBuffer(Device* d, size_t size) {
    absl::StatusOr<std::unique_ptr<Buffer>> b = d->default_buffer_type()->Allocate(size);
    EXPECT_TRUE(b.ok()) << d->name() << " Allocate(" << size << "): " << b.status();
    if (!b.ok()) return nullptr;
    buffers_.push_back(std::move(*b));
    return buffers_.back().get();
  }

  // f32 tensors of these shapes, back to back (aligned) in one new buffer of `d`.
  std::vector<Tensor*> PlaceAll(Device* d, const std::vector<std::vector<int64_t>>& shapes) {
    BufferType* type = d->default_buffer_type();
    std::vector<Tensor*> ts;
    std::vector<size_t> offsets;
    size_t end = 0;
    for (const auto& shape : shapes) {
      Tensor* t = *ctx_.NewTensor(DType::kF32, shape);
      t->SetName(absl::StrCat("t", ts.size()));
      offsets.push_back(end);
      end = AlignUp(end + type->AllocSize(*t), type->alignment());
      ts.push_back(t);
    }
    Buffer* buffer = NewBuffer(d, end);
    if (buffer == nullptr) return {};
    for (size_t i = 0; i < ts.size(); ++i) {
      absl::Status s = PlaceTensor(buffer, ts[i], offsets[i]);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return {};
    }
    return ts;
  }

  Stream* NewStream(Device* d) {
    absl::StatusOr<std::unique_ptr<Stream>> s = d->CreateStream();
    EXPECT_TRUE(s.ok()) << d->name() << " CreateStream: " << s.status();
    if (!s.ok()) return nullptr;
    streams_.push_back(std::move(*s));
    return streams_.back().get();
  }

  static void Write(Tensor* t, const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(bytes.size(), t->NumBytes());
    absl::Status s = t->buffer->SetTensor(t, bytes.data(), 0, bytes.size());
    ASSERT_TRUE(s.ok()) << s;
  }
  static std::vector<uint8_t> Read(const Tensor* t) {
    std::vector<uint8_t> bytes(t->NumBytes());
    absl::Status s = t->buffer->GetTensor(t, bytes.data(), 0, bytes.size());
    EXPECT_TRUE(s.ok()) << s;
    return bytes;
  }

  // out = x + y over `ne0` x `ne1` f32 inputs, allocated on the device by a GraphAllocator
  // (a compute buffer, as the scheduler does).
  struct AddGraph {
    Tensor* x = nullptr;
    Tensor* y = nullptr;
    Tensor* out = nullptr;
    Graph graph;
  };
  AddGraph NewAddGraph(int64_t ne0, int64_t ne1) {
    AddGraph g;
    g.x = *ctx_.NewTensor(DType::kF32, {ne0, ne1});
    g.y = *ctx_.NewTensor(DType::kF32, {ne0, ne1});
    g.x->SetName("x");
    g.y->SetName("y");
    g.x->flags |= kFlagInput;
    g.y->flags |= kFlagInput;
    g.out = *Add(ctx_, g.x, g.y);
    g.out->SetName("out");
    g.graph = *BuildGraph({g.out});
    runs_.push_back(std::make_unique<GraphAllocator>(type_));
    absl::Status s = runs_.back()->Allocate(g.graph);
    EXPECT_TRUE(s.ok()) << s;
    return g;
  }
  // x + y in double, rounded once to f32 (what an f32 ADD gives exactly).
  static std::vector<float> AddReference(const std::vector<float>& x, const std::vector<float>& y) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      out[i] = static_cast<float>(static_cast<double>(x[i]) + static_cast<double>(y[i]));
    }
    return out;
  }

  Device* device_ = nullptr;
  Device* peer_ = nullptr;
  Device* host_ = nullptr;
  BufferType* type_ = nullptr;
  Context ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::unique_ptr<GraphAllocator>> runs_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

// ---------------------------------------------------------------------------------------
// BufferType and Buffer.

// "Allocates a buffer of `size` bytes; RESOURCE_EXHAUSTED when the memory is not there."
// "size_t alignment() const = 0;  // every tensor's data is aligned to this."
// "Every fallible call returns absl::Status: bad input never aborts the process."
TEST_P(BackendConformanceTest, AllocatesTheSizeAskedAligned) {
  const size_t align = type_->alignment();
  ASSERT_GT(align, 0u);
  EXPECT_EQ(align & (align - 1), 0u) << "alignment " << align << " is not a power of two";
  EXPECT_GE(type_->max_size(), 1u);
  EXPECT_EQ(type_->device(), device_);
  for (size_t size : {size_t{1}, size_t{3}, size_t{4096 + 5}}) {
    absl::StatusOr<std::unique_ptr<Buffer>> b = type_->Allocate(size);
    ASSERT_TRUE(b.ok()) << "Allocate(" << size << "): " << b.status();
    EXPECT_GE((*b)->size(), size);
    EXPECT_EQ((*b)->type(), type_);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*b)->base()) % align, 0u)
        << "Allocate(" << size << ")'s base " << (*b)->base() << " is not " << align
        << "-aligned, so a tensor at offset 0 would not be";
    EXPECT_TRUE((*b)->Clear(0x5a).ok());
  }
  // Zero bytes: a buffer (that holds nothing) or an error, never a crash.
  absl::StatusOr<std::unique_ptr<Buffer>> empty = type_->Allocate(0);
  if (empty.ok()) {
    EXPECT_TRUE((*empty)->Clear(0).ok());
  }
  // Far more than any device has: refused, at the latest when a tensor is placed in it (a
  // META buffer only reserves addresses; its devices' memory is taken at placement). Sizes
  // next to SIZE_MAX must not wrap around to a small allocation that claims to be huge.
  for (size_t size : {size_t{1} << 60, SIZE_MAX - 8, SIZE_MAX}) {
    absl::StatusOr<std::unique_ptr<Buffer>> huge = type_->Allocate(size);
    if (!huge.ok()) {
      EXPECT_TRUE(absl::IsResourceExhausted(huge.status()))
          << "Allocate(" << size << ") gave " << huge.status() << ", want RESOURCE_EXHAUSTED";
      continue;
    }
    // The largest tensor there is (kMaxTensorBytes, 256 TiB).
    Tensor* t = *ctx_.NewTensor(DType::kF32, {int64_t{1} << 46});
    absl::Status placed = PlaceTensor(huge->get(), t, type_->alignment());
    EXPECT_TRUE(absl::IsResourceExhausted(placed))
        << "Allocate(" << size << ") gave a buffer of " << (*huge)->size()
        << " bytes, and placing a 256 TiB tensor in it gave " << placed
        << ", want RESOURCE_EXHAUSTED from one or the other";
    if (placed.ok()) {
      // Do not touch it: a wrapped allocation would be written at a wild address.
      t->buffer = nullptr;
      t->data = nullptr;
    }
  }
}

// "size_t AllocSize(const Tensor& t) const  // Bytes `t` occupies in this memory (a
// backend may pad)": never less than the tensor's bytes.
TEST_P(BackendConformanceTest, AllocSizeCoversTheTensor) {
  for (int64_t n : {1, 3, 100, 4099}) {
    Tensor* t = *ctx_.NewTensor(DType::kF32, {n});
    EXPECT_GE(type_->AllocSize(*t), t->NumBytes()) << n;
  }
}

// "Writes/reads `size` bytes at byte `offset` of t's data. Ranges are checked."
// Guards placed right before and after the tensor show that a write stays inside it.
TEST_P(BackendConformanceTest, SetGetRoundTripAtOffsets) {
  std::vector<Tensor*> ts = PlaceAll(device_, {{16}, {20, 5}, {16}});
  ASSERT_EQ(ts.size(), 3u);
  Tensor *lo = ts[0], *t = ts[1], *hi = ts[2];
  const std::vector<uint8_t> lo_bytes = BytePattern(lo->NumBytes(), 1);
  const std::vector<uint8_t> hi_bytes = BytePattern(hi->NumBytes(), 2);
  std::vector<uint8_t> want = BytePattern(t->NumBytes(), 3);
  Write(lo, lo_bytes);
  Write(hi, hi_bytes);
  Write(t, want);
  ASSERT_EQ(Read(t), want);
  // Partial writes: aligned, unaligned, one byte, the last bytes, nothing at the end.
  const std::pair<size_t, size_t> ranges[] = {{0, 4},   {4, 80},  {7, 13}, {123, 1},
                                              {397, 3}, {400, 0}, {0, 400}};
  uint32_t seed = 10;
  for (auto [offset, size] : ranges) {
    const std::vector<uint8_t> part = BytePattern(size, seed++);
    absl::Status s = t->buffer->SetTensor(t, part.data(), offset, size);
    ASSERT_TRUE(s.ok()) << "SetTensor(" << offset << ", " << size << "): " << s;
    std::copy(part.begin(), part.end(), want.begin() + offset);
    std::vector<uint8_t> back(size + 2, 0xEE);
    s = t->buffer->GetTensor(t, back.data() + 1, offset, size);
    ASSERT_TRUE(s.ok()) << "GetTensor(" << offset << ", " << size << "): " << s;
    EXPECT_EQ(back.front(), 0xEE);
    EXPECT_EQ(back.back(), 0xEE) << "GetTensor(" << offset << ", " << size
                                 << ") wrote past the host bytes it was given";
    EXPECT_TRUE(
        SameBytes(std::vector<uint8_t>(back.begin() + 1, back.end() - 1),
                  std::vector<uint8_t>(want.begin() + offset, want.begin() + offset + size)))
        << "at offset " << offset << ", " << size << " bytes";
  }
  EXPECT_TRUE(SameBytes(Read(t), want));
  EXPECT_TRUE(SameBytes(Read(lo), lo_bytes)) << "a write to the tensor changed the one before it";
  EXPECT_TRUE(SameBytes(Read(hi), hi_bytes)) << "a write to the tensor changed the one after it";
}

// "Ranges are checked." with "bad input never aborts the process": a range outside the
// tensor is OUT_OF_RANGE (or INVALID_ARGUMENT), and nothing is written, neither the part
// inside the tensor nor the neighbour after it.
TEST_P(BackendConformanceTest, OutOfRangeIsAnErrorAndWritesNothing) {
  std::vector<Tensor*> ts = PlaceAll(device_, {{20, 5}, {16}});
  ASSERT_EQ(ts.size(), 2u);
  Tensor *t = ts[0], *next = ts[1];
  const std::vector<uint8_t> t_bytes = BytePattern(t->NumBytes(), 4);
  const std::vector<uint8_t> next_bytes = BytePattern(next->NumBytes(), 5);
  Write(t, t_bytes);
  Write(next, next_bytes);
  const size_t n = t->NumBytes();  // 400.
  const std::pair<size_t, size_t> bad[] = {{n - 4, 8},    {n, 1},        {n + 1, 0},   {0, n + 1},
                                           {SIZE_MAX, 2}, {4, SIZE_MAX}, {SIZE_MAX, 0}};
  std::vector<uint8_t> data(2 * n, 0xA5);
  for (auto [offset, size] : bad) {
    // Sizes past the host data are never dereferenced by a checked call.
    absl::Status s = t->buffer->SetTensor(t, data.data(), offset, size);
    EXPECT_TRUE(IsRangeError(s)) << "SetTensor(" << offset << ", " << size << ") gave " << s;
    s = t->buffer->MemsetTensor(t, 0xA5, offset, size);
    EXPECT_TRUE(IsRangeError(s)) << "MemsetTensor(" << offset << ", " << size << ") gave " << s;
    std::vector<uint8_t> back(2 * n, 0x11);
    s = t->buffer->GetTensor(t, back.data(), offset, size);
    EXPECT_TRUE(IsRangeError(s)) << "GetTensor(" << offset << ", " << size << ") gave " << s;
  }
  EXPECT_TRUE(SameBytes(Read(t), t_bytes)) << "a refused range still wrote into the tensor";
  EXPECT_TRUE(SameBytes(Read(next), next_bytes)) << "a refused range still wrote past the tensor";
}

// "virtual absl::Status MemsetTensor(...)" (the Set/GetTensor range rules) and
// "virtual absl::Status Clear(uint8_t value) = 0;  // fills the whole buffer."
TEST_P(BackendConformanceTest, MemsetAndClear) {
  std::vector<Tensor*> ts = PlaceAll(device_, {{20, 5}, {16}});
  ASSERT_EQ(ts.size(), 2u);
  Tensor *t = ts[0], *next = ts[1];
  std::vector<uint8_t> want = BytePattern(t->NumBytes(), 6);
  Write(t, want);
  Write(next, BytePattern(next->NumBytes(), 7));
  for (auto [offset, size, value] : {std::tuple<size_t, size_t, uint8_t>{40, 8, 0},
                                     {3, 5, 0x7f},
                                     {0, 400, 0x01},
                                     {399, 1, 0xff},
                                     {50, 0, 9}}) {
    absl::Status s = t->buffer->MemsetTensor(t, value, offset, size);
    ASSERT_TRUE(s.ok()) << "MemsetTensor(" << offset << ", " << size << "): " << s;
    std::fill(want.begin() + offset, want.begin() + offset + size, value);
    EXPECT_TRUE(SameBytes(Read(t), want)) << "after MemsetTensor(" << int(value) << ") of ["
                                          << offset << ", " << offset + size << ")";
  }
  ASSERT_TRUE(t->buffer->Clear(0xAB).ok());
  EXPECT_TRUE(SameBytes(Read(t), std::vector<uint8_t>(t->NumBytes(), 0xAB)));
  EXPECT_TRUE(SameBytes(Read(next), std::vector<uint8_t>(next->NumBytes(), 0xAB)))
      << "Clear left a tensor of the buffer as it was";
}

// ---------------------------------------------------------------------------------------
// 2D rows (core/strided_range.h).

struct RowCase {
  const char* what;
  StridedRange r;
};
// Over a 64 x 16 f32 tensor (4096 bytes, rows of 256 bytes).
const RowCase kRowCases[] = {
    {"no rows", {0, 16, 0, 256, 0}},
    {"one row", {12, 20, 1, 0, 0}},
    {"packed rows", {256, 512, 4, 512, 0}},
    {"packed rows to a host stride", {256, 100, 4, 100, 130}},
    {"a column slice of every row", {32, 64, 16, 256, 0}},
    {"a column slice to a host stride", {32, 64, 16, 256, 80}},
    {"the last row ends at the tensor's end", {192, 64, 16, 256, 0}},
};

// "Writes/reads the rows of r (a view: core/strided_range.h) in one call; ranges are
// checked." and the stream's "The 2D forms", in order with the stream's other work.
TEST_P(BackendConformanceTest, RowsRoundTripAndOutOfRangeRowsAreRefused) {
  std::vector<Tensor*> ts = PlaceAll(device_, {{64, 16}, {16}});
  ASSERT_EQ(ts.size(), 2u);
  Tensor *t = ts[0], *next = ts[1];
  const std::vector<uint8_t> next_bytes = BytePattern(next->NumBytes(), 8);
  Write(next, next_bytes);
  Stream* stream = NewStream(device_);
  ASSERT_NE(stream, nullptr);
  uint32_t seed = 20;
  for (bool async : {false, true}) {
    for (const RowCase& c : kRowCases) {
      SCOPED_TRACE(absl::StrCat(c.what, async ? " (stream)" : " (buffer)"));
      const StridedRange& r = c.r;
      std::vector<uint8_t> tensor = BytePattern(t->NumBytes(), seed++);
      Write(t, tensor);
      const size_t host_bytes = r.n_rows == 0 ? 0 : (r.n_rows - 1) * r.HostStride() + r.row_size;
      const std::vector<uint8_t> host = BytePattern(host_bytes + 1, seed++);
      absl::Status s = async ? stream->SetTensor2DAsync(t, host.data(), r)
                             : t->buffer->SetTensor2D(t, host.data(), r);
      ASSERT_TRUE(s.ok()) << s;
      std::vector<uint8_t> got(host_bytes + 1, 0xEE);
      s = async ? stream->GetTensor2DAsync(t, got.data(), r)
                : t->buffer->GetTensor2D(t, got.data(), r);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_TRUE(stream->Synchronize().ok());
      tensor = testing::ReferenceSetRows(r, tensor, host);
      EXPECT_TRUE(SameBytes(Read(t), tensor)) << "SetTensor2D wrote other bytes than the rows";
      EXPECT_TRUE(SameBytes(got, testing::ReferenceGetRows(r, tensor, host_bytes + 1, 0xEE)))
          << "GetTensor2D read other bytes than the rows (or wrote between them)";
    }
  }
  // Refused: a last row past the end, rows that overlap, an offset past the end.
  const std::vector<uint8_t> before = BytePattern(t->NumBytes(), 99);
  Write(t, before);
  const std::pair<const char*, StridedRange> bad[] = {
      {"last row past the end", {200, 64, 16, 256, 0}},
      {"overlapping rows", {0, 64, 2, 32, 0}},
      {"offset past the end", {4097, 4, 1, 0, 0}},
      {"rows past the end", {0, 256, 17, 256, 0}},
  };
  std::vector<uint8_t> host(8192, 0x33);
  for (const auto& [what, r] : bad) {
    EXPECT_TRUE(IsRangeError(t->buffer->SetTensor2D(t, host.data(), r))) << what;
    EXPECT_TRUE(IsRangeError(t->buffer->GetTensor2D(t, host.data(), r))) << what;
    EXPECT_TRUE(IsRangeError(stream->SetTensor2DAsync(t, host.data(), r))) << what;
    EXPECT_TRUE(IsRangeError(stream->GetTensor2DAsync(t, host.data(), r))) << what;
  }
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_TRUE(SameBytes(Read(t), before)) << "refused rows were still written";
  EXPECT_TRUE(SameBytes(Read(next), next_bytes)) << "refused rows were written past the tensor";
}

// ---------------------------------------------------------------------------------------
// Copies between buffers and devices.

// "Copies src (in another buffer, maybe of another device) into dst of this buffer when
// the backend can do it directly. Default: UNIMPLEMENTED (callers go through host
// memory)." So: the bytes arrive, or UNIMPLEMENTED with dst as it was (the caller then
// copies through the host and must find nothing half done). And for the stream's
// CopyTensorAsync ("without a host round trip when possible. Default: UNIMPLEMENTED") the
// same once the stream is synchronized.
TEST_P(BackendConformanceTest, CopyFromCopiesOrIsUnimplementedWithoutTouchingDst) {
  std::vector<Tensor*> dst_ts = PlaceAll(device_, {{32, 4}, {16}});
  ASSERT_EQ(dst_ts.size(), 2u);
  Tensor *dst = dst_ts[0], *after = dst_ts[1];
  const std::vector<uint8_t> dst_bytes = BytePattern(dst->NumBytes(), 30);
  const std::vector<uint8_t> after_bytes = BytePattern(after->NumBytes(), 31);
  Write(after, after_bytes);
  struct Source {
    std::string what;
    Device* device;
  };
  std::vector<Source> sources = {{"another buffer of the device", device_},
                                 {"host (CPU) memory", host_}};
  if (peer_ != nullptr) sources.push_back({absl::StrCat("device ", peer_->name()), peer_});
  Stream* stream = NewStream(device_);
  ASSERT_NE(stream, nullptr);
  uint32_t seed = 40;
  std::string copies;  // which copies the device does (a property of the run's report).
  for (const Source& source : sources) {
    std::vector<Tensor*> src_ts = PlaceAll(source.device, {{32, 4}, {32, 3}});
    ASSERT_EQ(src_ts.size(), 2u);
    Tensor *src = src_ts[0], *smaller = src_ts[1];
    const std::vector<uint8_t> src_bytes = BytePattern(src->NumBytes(), seed++);
    Write(src, src_bytes);
    Write(smaller, BytePattern(smaller->NumBytes(), seed++));
    for (bool async : {false, true}) {
      SCOPED_TRACE(absl::StrCat("from ", source.what, async ? ", CopyTensorAsync" : ", CopyFrom"));
      Write(dst, dst_bytes);
      absl::Status s = async ? stream->CopyTensorAsync(src, dst) : dst->buffer->CopyFrom(src, dst);
      ASSERT_TRUE(stream->Synchronize().ok());
      copies += absl::StrCat(copies.empty() ? "" : "; ", source.device->name(),
                             async ? " async: " : ": ", s.ok() ? "OK" : "UNIMPLEMENTED");
      if (s.ok()) {
        EXPECT_TRUE(SameBytes(Read(dst), src_bytes))
            << "the copy said OK but dst does not hold src";
      } else {
        EXPECT_TRUE(absl::IsUnimplemented(s)) << "want OK or UNIMPLEMENTED, got " << s;
        EXPECT_TRUE(SameBytes(Read(dst), dst_bytes))
            << "the copy answered " << s << " but changed dst";
      }
      // A source of another size is refused (or not supported): dst stays as it was.
      Write(dst, dst_bytes);
      s = async ? stream->CopyTensorAsync(smaller, dst) : dst->buffer->CopyFrom(smaller, dst);
      ASSERT_TRUE(stream->Synchronize().ok());
      EXPECT_FALSE(s.ok()) << "a copy of " << smaller->NumBytes() << " bytes into "
                           << dst->NumBytes() << " said OK";
      EXPECT_TRUE(SameBytes(Read(dst), dst_bytes)) << "a refused copy (" << s << ") changed dst";
      EXPECT_TRUE(SameBytes(Read(after), after_bytes)) << "a copy wrote past dst";
    }
  }
  ::testing::Test::RecordProperty("copies", copies);
}

// ---------------------------------------------------------------------------------------
// Streams.

// "Asynchronous transfers; defaults are synchronous through the tensor's buffer." and
// "Synchronize() = 0;  // waits for all queued work.": transfers queued on one stream
// happen in the order queued, and every read has its bytes after Synchronize.
TEST_P(BackendConformanceTest, AsyncTransfersHappenInQueueOrder) {
  std::vector<Tensor*> ts = PlaceAll(device_, {{32, 8}});
  ASSERT_EQ(ts.size(), 1u);
  Tensor* t = ts[0];
  Stream* stream = NewStream(device_);
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(stream->device(), device_);
  const size_t n = t->NumBytes();
  const std::vector<uint8_t> a = BytePattern(n, 50), b = BytePattern(80, 51),
                             c = BytePattern(n, 52);
  std::vector<uint8_t> got1(n, 0), got2(n, 0), got3(n, 0);
  ASSERT_TRUE(stream->SetTensorAsync(t, a.data(), 0, n).ok());
  ASSERT_TRUE(stream->SetTensorAsync(t, b.data(), 40, b.size()).ok());
  ASSERT_TRUE(stream->GetTensorAsync(t, got1.data(), 0, n).ok());
  ASSERT_TRUE(stream->SetTensorAsync(t, c.data(), 0, n).ok());
  ASSERT_TRUE(stream->GetTensorAsync(t, got2.data(), 0, n).ok());
  ASSERT_TRUE(stream->SetTensorAsync(t, a.data(), 4, 8).ok());
  ASSERT_TRUE(stream->GetTensorAsync(t, got3.data() + 4, 4, 8).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  std::vector<uint8_t> want1 = a;
  std::copy(b.begin(), b.end(), want1.begin() + 40);
  EXPECT_TRUE(SameBytes(got1, want1)) << "a read did not see the two writes queued before it";
  EXPECT_TRUE(SameBytes(got2, c)) << "a read did not see the write queued just before it";
  EXPECT_TRUE(SameBytes(std::vector<uint8_t>(got3.begin() + 4, got3.begin() + 12),
                        std::vector<uint8_t>(a.begin(), a.begin() + 8)));
  // Ranges are checked on the stream too.
  EXPECT_TRUE(IsRangeError(stream->SetTensorAsync(t, a.data(), n - 4, 8)));
  EXPECT_TRUE(IsRangeError(stream->GetTensorAsync(t, got1.data(), n, 1)));
  ASSERT_TRUE(stream->Synchronize().ok());
}

// "Compute(Graph& graph) = 0;  // Runs every node of the graph": a small MUL_MAT equals
// the same product computed here in double.
TEST_P(BackendConformanceTest, ComputesASmallMatMulAsInDouble) {
  constexpr int64_t kK = 16, kM = 7, kN = 3;
  Tensor* a = *ctx_.NewTensor(DType::kF32, {kK, kM});
  Tensor* b = *ctx_.NewTensor(DType::kF32, {kK, kN});
  a->flags |= kFlagInput;
  b->flags |= kFlagInput;
  Tensor* out = *MulMat(ctx_, a, b);  // out[n][m] = sum_k a[m][k] * b[n][k].
  ASSERT_EQ(out->ne[0], kM);
  ASSERT_EQ(out->ne[1], kN);
  if (!device_->SupportsOp(*out)) {
    // Allowed (the scheduler then runs it elsewhere); not a skip, which would mark the
    // device's whole ctest entry skipped.
    ::testing::Test::RecordProperty("mul_mat", "unsupported");
    return;
  }
  Graph graph = *BuildGraph({out});
  Stream* stream = NewStream(device_);
  ASSERT_NE(stream, nullptr);
  const std::vector<float> av = testing::RandomFloats(kK * kM, 60);
  const std::vector<float> bv = testing::RandomFloats(kK * kN, 61);
  testing::GraphRun run;
  absl::Status s = testing::AllocateAndCompute(device_, stream, graph, {{a, av}, {b, bv}}, &run);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(stream->Synchronize().ok());
  const std::vector<float> got = AsFloats(Read(out));
  ASSERT_EQ(got.size(), static_cast<size_t>(kM * kN));
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t m = 0; m < kM; ++m) {
      double want = 0;
      for (int64_t k = 0; k < kK; ++k) want += double(av[m * kK + k]) * double(bv[n * kK + k]);
      EXPECT_NEAR(got[n * kM + m], want, 1e-5 * (1 + std::abs(want)))
          << "out[" << n << "][" << m << "]";
    }
  }
}

// The stream's transfers and Compute are one queue: a Compute sees the writes queued
// before it and not those after, and a read queued after it sees its result ("an
// execution queue on one device").
TEST_P(BackendConformanceTest, ComputeKeepsItsPlaceAmongTransfers) {
  AddGraph g = NewAddGraph(8, 4);
  ASSERT_NE(g.out->buffer, nullptr);
  Stream* stream = NewStream(device_);
  ASSERT_NE(stream, nullptr);
  const size_t n = g.x->NumBytes();
  const std::vector<float> x1 = testing::RandomFloats(32, 70), x2 = testing::RandomFloats(32, 71);
  const std::vector<float> y = testing::RandomFloats(32, 72);
  std::vector<float> out1(32, -1), out2(32, -1);
  ASSERT_TRUE(stream->SetTensorAsync(g.x, x1.data(), 0, n).ok());
  ASSERT_TRUE(stream->SetTensorAsync(g.y, y.data(), 0, n).ok());
  absl::Status s = stream->Compute(g.graph);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(stream->GetTensorAsync(g.out, out1.data(), 0, n).ok());
  ASSERT_TRUE(stream->SetTensorAsync(g.x, x2.data(), 0, n).ok());
  s = stream->Compute(g.graph);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(stream->GetTensorAsync(g.out, out2.data(), 0, n).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(out1, AddReference(x1, y)) << "the first Compute or its read were out of order";
  EXPECT_EQ(out2, AddReference(x2, y)) << "the second Compute did not see the write before it";
}

// "Event support; default UNIMPLEMENTED (the scheduler then synchronizes instead)" and
// Event::Synchronize "blocks the host until the event has happened": an event recorded
// after a write, synchronized, then a read sees the write; another stream that waits for
// the event reads it too; a read queued before the event has its bytes once it happened.
TEST_P(BackendConformanceTest, EventsOrderWorkAcrossStreamsAndTheHost) {
  absl::StatusOr<std::unique_ptr<Event>> event = device_->CreateEvent();
  if (absl::IsUnimplemented(event.status())) {
    // The documented default: nothing more to hold the device to.
    ::testing::Test::RecordProperty("events", "UNIMPLEMENTED");
    return;
  }
  ASSERT_TRUE(event.ok()) << event.status();
  std::vector<Tensor*> ts = PlaceAll(device_, {{64, 4}});
  ASSERT_EQ(ts.size(), 1u);
  Tensor* t = ts[0];
  const size_t n = t->NumBytes();
  Stream* a = NewStream(device_);
  Stream* b = NewStream(device_);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const std::vector<uint8_t> v = BytePattern(n, 80), w = BytePattern(n, 81);

  ASSERT_TRUE(a->SetTensorAsync(t, v.data(), 0, n).ok());
  ASSERT_TRUE(a->RecordEvent(event->get()).ok());
  ASSERT_TRUE((*event)->Synchronize().ok());
  EXPECT_TRUE(SameBytes(Read(t), v)) << "after the event of a write, a read does not see it";

  ASSERT_TRUE(a->SetTensorAsync(t, w.data(), 0, n).ok());
  ASSERT_TRUE(a->RecordEvent(event->get()).ok());
  std::vector<uint8_t> got(n, 0);
  ASSERT_TRUE(b->WaitEvent(event->get()).ok());
  ASSERT_TRUE(b->GetTensorAsync(t, got.data(), 0, n).ok());
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_TRUE(SameBytes(got, w)) << "a stream that waited for the event read before the write";

  std::vector<uint8_t> early(n, 0);
  ASSERT_TRUE(a->GetTensorAsync(t, early.data(), 0, n).ok());
  ASSERT_TRUE(a->RecordEvent(event->get()).ok());
  ASSERT_TRUE((*event)->Synchronize().ok());
  EXPECT_EQ(early, w) << "a read queued before the event had no bytes when the event happened";
  ASSERT_TRUE(a->Synchronize().ok());
}

// "work queued between BeginBatch and EndBatch may be held on the host and submitted
// together ...; anything that waits for it submits it first.": a batch completes by
// EndBatch + Synchronize, and a Synchronize (or an event's) inside a batch does not hang
// and sees the batch's work.
TEST_P(BackendConformanceTest, BatchedWorkCompletesAndWaitsSubmitIt) {
  AddGraph g = NewAddGraph(8, 4);
  Stream* stream = NewStream(device_);
  ASSERT_NE(stream, nullptr);
  const size_t n = g.x->NumBytes();
  const std::vector<float> x1 = testing::RandomFloats(32, 90), x2 = testing::RandomFloats(32, 91);
  const std::vector<float> y = testing::RandomFloats(32, 92);
  std::vector<float> out1(32, -1), out2(32, -1), out3(32, -1);

  stream->BeginBatch();
  ASSERT_TRUE(stream->SetTensorAsync(g.x, x1.data(), 0, n).ok());
  ASSERT_TRUE(stream->SetTensorAsync(g.y, y.data(), 0, n).ok());
  ASSERT_TRUE(stream->Compute(g.graph).ok());
  ASSERT_TRUE(stream->GetTensorAsync(g.out, out1.data(), 0, n).ok());
  absl::Status s = stream->EndBatch();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(out1, AddReference(x1, y)) << "a batch's work was not done by EndBatch+Synchronize";

  // A wait inside a batch submits what is held.
  stream->BeginBatch();
  ASSERT_TRUE(stream->SetTensorAsync(g.x, x2.data(), 0, n).ok());
  ASSERT_TRUE(stream->Compute(g.graph).ok());
  ASSERT_TRUE(stream->GetTensorAsync(g.out, out2.data(), 0, n).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(out2, AddReference(x2, y)) << "Synchronize inside a batch did not run the batch";
  absl::StatusOr<std::unique_ptr<Event>> event = device_->CreateEvent();
  if (event.ok()) {
    ASSERT_TRUE(stream->SetTensorAsync(g.x, x1.data(), 0, n).ok());
    ASSERT_TRUE(stream->Compute(g.graph).ok());
    ASSERT_TRUE(stream->GetTensorAsync(g.out, out3.data(), 0, n).ok());
    ASSERT_TRUE(stream->RecordEvent(event->get()).ok());
    ASSERT_TRUE((*event)->Synchronize().ok());
    EXPECT_EQ(out3, AddReference(x1, y)) << "an event's Synchronize inside a batch did not "
                                            "run the work held before it";
  }
  ASSERT_TRUE(stream->EndBatch().ok());
  ASSERT_TRUE(stream->Synchronize().ok());
}

// PushTensorAsync: "copies src (this stream's device) into dst (`to`'s device) after the
// work queued here so far, with no one waiting: `to`'s work queued later waits for the
// bytes, and work queued here later may overwrite src. Default: UNIMPLEMENTED (the caller
// waits for this stream and copies on `to`)." So a push queued after a Compute carries
// that Compute's result, not the next one's; UNIMPLEMENTED leaves dst alone.
TEST_P(BackendConformanceTest, PushCarriesTheBytesOfItsPlaceInTheQueue) {
  ASSERT_NE(peer_, nullptr);
  AddGraph g = NewAddGraph(8, 4);
  std::vector<Tensor*> dst_ts = PlaceAll(peer_, {{8, 4}});
  ASSERT_EQ(dst_ts.size(), 1u);
  Tensor* dst = dst_ts[0];
  const std::vector<uint8_t> dst_bytes = BytePattern(dst->NumBytes(), 100);
  Write(dst, dst_bytes);
  Stream* from = NewStream(device_);
  Stream* to = NewStream(peer_);
  ASSERT_TRUE(from != nullptr && to != nullptr);
  const size_t n = g.x->NumBytes();
  const std::vector<float> x1 = testing::RandomFloats(32, 101), x2 = testing::RandomFloats(32, 102);
  const std::vector<float> y = testing::RandomFloats(32, 103);
  ASSERT_TRUE(from->SetTensorAsync(g.x, x1.data(), 0, n).ok());
  ASSERT_TRUE(from->SetTensorAsync(g.y, y.data(), 0, n).ok());
  ASSERT_TRUE(from->Compute(g.graph).ok());
  absl::Status pushed = from->PushTensorAsync(g.out, to, dst);
  ASSERT_TRUE(pushed.ok() || absl::IsUnimplemented(pushed))
      << "want OK or UNIMPLEMENTED, got " << pushed;
  ASSERT_TRUE(from->SetTensorAsync(g.x, x2.data(), 0, n).ok());
  ASSERT_TRUE(from->Compute(g.graph).ok());  // overwrites the pushed tensor.
  std::vector<float> got(32, -1);
  ASSERT_TRUE(to->GetTensorAsync(dst, got.data(), 0, n).ok());
  ASSERT_TRUE(to->Synchronize().ok());
  ASSERT_TRUE(from->Synchronize().ok());
  if (pushed.ok()) {
    EXPECT_EQ(got, AddReference(x1, y)) << "the push did not carry the result of the Compute "
                                           "queued before it";
  } else {
    EXPECT_EQ(got, AsFloats(dst_bytes)) << "the push answered UNIMPLEMENTED but changed dst";
  }
  ::testing::Test::RecordProperty("push", pushed.ok() ? "OK" : "UNIMPLEMENTED");
}

std::vector<std::string> DeviceNames() {
  std::vector<std::string> names;
  for (const char* n : {"CPU", "CPUx2", "Vulkan0", "RPC_CPU", "META_CPUx2", "CUDA0"}) {
    names.push_back(n);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendConformanceTest, ::testing::ValuesIn(DeviceNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  // Lavapipe (a CPU-type Vulkan device) joins the registry only with TG_VULKAN_CPU=1; the
  // suite wants it wherever it is installed. A value already set (0) is kept.
  setenv("TG_VULKAN_CPU", "1", 0);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new tg::Backends());
  return RUN_ALL_TESTS();
}
