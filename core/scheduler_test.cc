// Scheduler tests on hand-built graphs whose weights live on different virtual CPU devices:
// device assignment, splits, copies of split inputs, results equal to one device's, the
// pipeline, and errors (no device supports an op, bad backends, run-time errors in a split).
#include "core/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_buffer.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/cpu_stream.h"
#include "core/ops.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::tg::testing::RandomFloats;
using ::tg::testing::ReadF32;

// A CPU device that runs only some ops, and optionally shares another device's memory type
// (a BLAS-like accelerator) or refuses every memory but its own (a discrete GPU), and asks
// for the nodes `offload` accepts when their weights are in host memory (Device::OffloadOp).
class TestDevice : public cpu::CpuDevice {
 public:
  TestDevice(std::string name, std::function<bool(Op)> supports, BufferType* shared = nullptr,
             bool private_memory = false, std::function<bool(const Tensor&)> offload = nullptr)
      : cpu::CpuDevice(name, name, 1),
        supports_(std::move(supports)),
        shared_(shared),
        private_memory_(private_memory),
        offload_(std::move(offload)) {}
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::unique_ptr<Stream>(new cpu::CpuStream(this, 1));
  }
  BufferType* default_buffer_type() override {
    return shared_ != nullptr ? shared_ : cpu::CpuDevice::default_buffer_type();
  }
  bool SupportsOp(const Tensor& node) const override { return supports_(node.op); }
  bool SupportsBufferType(const BufferType* type) const override {
    if (!private_memory_) return cpu::CpuDevice::SupportsBufferType(type);
    return type == const_cast<TestDevice*>(this)->default_buffer_type();
  }
  bool OffloadOp(const Tensor& node) const override { return offload_ && offload_(node); }

 private:
  std::function<bool(Op)> supports_;
  BufferType* shared_;
  bool private_memory_;
  std::function<bool(const Tensor&)> offload_;
};

bool AllOps(Op) { return true; }

// A graph input of `type` and shape `ne` in `ctx`.
Tensor* NewInput(Context& ctx, DType type, std::initializer_list<int64_t> ne) {
  Tensor* t = *ctx.NewTensor(type, ne);
  t->flags |= kFlagInput;
  return t;
}

// A CPU device whose memory passes for device memory (is_host() false), as a GPU's. It
// counts the bytes read out of it through Buffer::GetTensor and GetTensor2D.
class NonHostDevice : public cpu::CpuDevice {
 public:
  NonHostDevice() : cpu::CpuDevice("DEV", "dev", 1) {}
  BufferType* default_buffer_type() override { return &type_; }
  bool SupportsBufferType(const BufferType* type) const override { return type == &type_; }
  size_t bytes_read() const { return type_.bytes_read; }

 private:
  class Counting : public cpu::CpuBuffer {
   public:
    Counting(BufferType* type, void* data, size_t size, size_t* bytes_read)
        : cpu::CpuBuffer(type, data, size), bytes_read_(bytes_read) {}
    absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override {
      *bytes_read_ += size;
      return cpu::CpuBuffer::GetTensor(t, data, offset, size);
    }
    absl::Status GetTensor2D(const Tensor* t, void* data, const StridedRange& r) override {
      *bytes_read_ += r.n_rows * r.row_size;
      return cpu::CpuBuffer::GetTensor2D(t, data, r);
    }

   private:
    size_t* bytes_read_;
  };
  class NotHost : public cpu::CpuBufferType {
   public:
    using cpu::CpuBufferType::CpuBufferType;
    bool is_host() const override { return false; }
    absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override {
      const size_t rounded =
          (size + cpu::kCpuAlignment - 1) / cpu::kCpuAlignment * cpu::kCpuAlignment;
      void* data = std::aligned_alloc(cpu::kCpuAlignment, std::max(rounded, cpu::kCpuAlignment));
      if (data == nullptr) return absl::ResourceExhaustedError("test: out of memory");
      return std::unique_ptr<Buffer>(new Counting(this, data, size, &bytes_read));
    }
    size_t bytes_read = 0;
  };
  NotHost type_{this};
};

class SchedulerTest : public ::testing::Test {
 protected:
  // An f32 weight [ne0, ne1] with random values in its own buffer on `device`.
  Tensor* Weight(Device& device, int64_t ne0, int64_t ne1, uint32_t seed) {
    Tensor* w = *weights_ctx_.NewTensor(DType::kF32, {ne0, ne1});
    w->SetName(absl::StrCat("w", seed));
    w->flags |= kFlagWeight;
    auto buffer = *device.default_buffer_type()->Allocate(w->NumBytes());
    buffer->set_usage(BufferUsage::kWeights);
    EXPECT_TRUE(PlaceTensor(buffer.get(), w, 0).ok());
    const std::vector<float> v = RandomFloats(w->NumElements(), seed);
    EXPECT_TRUE(buffer->SetTensor(w, v.data(), 0, w->NumBytes()).ok());
    buffers_.push_back(std::move(buffer));
    return w;
  }

  std::unique_ptr<Scheduler> MakeScheduler(std::vector<Device*> devices, int n_copies = 1) {
    std::vector<SchedulerBackend> backends;
    for (Device* d : devices) {
      streams_.push_back(*d->CreateStream());
      backends.push_back({d, streams_.back().get()});
    }
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(backends, {n_copies});
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(*s);
  }

  // `out` computed on CPU0 alone with input `x` set to `xv`.
  std::vector<float> OnCpu0(Tensor* out, Tensor* x, const std::vector<float>& xv) {
    Graph graph = *BuildGraph({out});
    auto s = MakeScheduler({&dev0_});
    auto g = *s->Schedule(graph);
    EXPECT_TRUE(g->SetInput(x, xv.data(), xv.size() * sizeof(float)).ok());
    EXPECT_TRUE(s->Compute(*g).ok());
    return ReadF32(*out);
  }

  // The output of an MLP on weights `w0`, `w1` for input `x`, scheduled on CPU0 alone.
  std::vector<float> OneDeviceMlp(Tensor* w0, Tensor* w1, const std::vector<float>& x);

  // An MLP on weights `w0`, `w1` scheduled on `devices`.
  struct ScheduledMlp;
  ScheduledMlp ScheduleMlp(std::vector<Device*> devices, Tensor* w0, Tensor* w1);

  cpu::CpuDevice dev0_{"CPU0", "cpu:0", 1};
  cpu::CpuDevice dev1_{"CPU1", "cpu:1", 1};
  std::vector<std::unique_ptr<Device>> devices_;  // a test's own; outlive its buffers, streams.
  Context weights_ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

// out = 2 * (w1 x silu(w0 x x)[:, 1:3]): w0 on one device, w1 on another; the slice is a view
// of a result that crosses devices.
struct Mlp {
  Context ctx;
  Tensor* x = nullptr;
  Tensor* y0 = nullptr;
  Tensor* act = nullptr;
  Tensor* slice = nullptr;
  Tensor* y1 = nullptr;
  Tensor* out = nullptr;
  Graph graph;
};

std::unique_ptr<Mlp> BuildMlp(Tensor* w0, Tensor* w1) {
  auto m = std::make_unique<Mlp>();
  m->x = NewInput(m->ctx, DType::kF32, {w0->ne[0], 3});
  m->x->SetName("x");
  m->y0 = *MulMat(m->ctx, w0, m->x);
  m->act = *Silu(m->ctx, m->y0);
  m->slice = *View(m->ctx, m->act, {m->act->ne[0], 2}, {m->act->nb[1]}, m->act->nb[1]);
  m->y1 = *MulMat(m->ctx, w1, m->slice);
  m->out = *Scale(m->ctx, m->y1, 2.0f);
  m->graph = *BuildGraph({m->out});
  return m;
}

// Schedules and computes an MLP with input `x`; returns its output.
std::vector<float> RunMlp(Scheduler& s, Mlp& m, const std::vector<float>& x) {
  absl::StatusOr<std::unique_ptr<ScheduledGraph>> g = s.Schedule(m.graph);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return {};
  EXPECT_TRUE((*g)->SetInput(m.x, x.data(), x.size() * sizeof(float)).ok());
  absl::Status status = s.Compute(**g);
  EXPECT_TRUE(status.ok()) << status;
  return ReadF32(*m.out);
}

// Feeds `x` to a scheduled MLP, computes it, and expects the output to be `expected` to the bit.
void ExpectMlpOutput(Scheduler& s, ScheduledGraph& g, Mlp& m, const std::vector<float>& x,
                     const std::vector<float>& expected) {
  ASSERT_TRUE(g.SetInput(m.x, x.data(), x.size() * sizeof(float)).ok());
  ASSERT_TRUE(s.Compute(g).ok());
  EXPECT_THAT(ReadF32(*m.out), ElementsAreArray(expected));
}

struct SchedulerTest::ScheduledMlp {
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<Mlp> mlp;
  std::unique_ptr<ScheduledGraph> graph;
};

SchedulerTest::ScheduledMlp SchedulerTest::ScheduleMlp(std::vector<Device*> devices, Tensor* w0,
                                                       Tensor* w1) {
  ScheduledMlp r;
  r.scheduler = MakeScheduler(std::move(devices));
  r.mlp = BuildMlp(w0, w1);
  r.graph = *r.scheduler->Schedule(r.mlp->graph);
  return r;
}

std::vector<float> SchedulerTest::OneDeviceMlp(Tensor* w0, Tensor* w1,
                                               const std::vector<float>& x) {
  auto one = MakeScheduler({&dev0_});
  auto ref = BuildMlp(w0, w1);
  return RunMlp(*one, *ref, x);
}

TEST_F(SchedulerTest, WeightsPinTheirNodesAndResultsMatchOneDevice) {
  Tensor* w0 = Weight(dev0_, 8, 16, 1);
  Tensor* w1 = Weight(dev1_, 16, 4, 2);
  const std::vector<float> x = RandomFloats(8 * 3, 3);

  const std::vector<float> expected = OneDeviceMlp(w0, w1, x);

  auto [two, m, g] = ScheduleMlp({&dev0_, &dev1_}, w0, w1);
  EXPECT_EQ(g->DeviceOf(m->x), &dev0_);  // an input lives where it is first read.
  EXPECT_EQ(g->DeviceOf(m->y0), &dev0_);
  EXPECT_EQ(g->DeviceOf(m->act), &dev0_);    // expanded down from y0.
  EXPECT_EQ(g->DeviceOf(m->slice), &dev0_);  // a view goes with its base.
  EXPECT_EQ(g->DeviceOf(m->y1), &dev1_);
  EXPECT_EQ(g->DeviceOf(m->out), &dev1_);
  ASSERT_EQ(g->splits().size(), 2u);
  EXPECT_EQ(g->splits()[0].device, 0);
  EXPECT_EQ(g->splits()[1].device, 1);
  ASSERT_EQ(g->splits()[1].inputs.size(), 1u);
  EXPECT_EQ(g->splits()[1].inputs[0].src, m->slice);
  EXPECT_EQ(g->splits()[1].inputs[0].copy->buffer->type()->device(), &dev1_);
  ExpectMlpOutput(*two, *g, *m, x, expected);
  const SchedulerStats stats = two->stats();
  EXPECT_EQ(stats.splits, 2);
  EXPECT_EQ(stats.copies, 1);
  EXPECT_EQ(stats.copy_bytes, static_cast<int64_t>(m->slice->NumBytes()));
  EXPECT_EQ(stats.graphs, 1);
}

// A CPU device whose streams log what the scheduler asks of them and push (a memcpy, as
// the memory is the host's) when pushes are on, as a device that copies to its peer in its
// own queue would.
class PushingDevice : public cpu::CpuDevice {
 public:
  PushingDevice(std::string name, std::vector<std::string>* log, bool pushes)
      : cpu::CpuDevice(name, name, 1), log_(log), pushes_(pushes) {}
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::unique_ptr<Stream>(new LoggingStream(this));
  }

 private:
  class LoggingStream : public cpu::CpuStream {
   public:
    explicit LoggingStream(PushingDevice* device) : cpu::CpuStream(device, 1), d_(device) {}
    absl::Status PushTensorAsync(const Tensor* src, Stream* to, Tensor* dst) override {
      if (!d_->pushes_) return Stream::PushTensorAsync(src, to, dst);
      d_->log_->push_back(absl::StrCat("push ", d_->name(), "->", to->device()->name()));
      return dst->buffer->SetTensor(dst, src->data, 0, src->NumBytes());
    }
    absl::Status Synchronize() override {
      d_->log_->push_back(absl::StrCat("sync ", d_->name()));
      return absl::OkStatus();
    }
    absl::Status Compute(Graph& graph) override {
      d_->log_->push_back(absl::StrCat("compute ", d_->name()));
      return cpu::CpuStream::Compute(graph);
    }

   private:
    PushingDevice* d_;
  };
  std::vector<std::string>* log_;
  bool pushes_;
};

// A device that pushes gets the split input from its source's stream (PushTensorAsync),
// and no one waits between the source's compute and the destination's: the destination's
// stream is not synchronized after the copy, nor the source before it. The result is the
// one-device result, as with the copy on the destination's stream (which synchronizes it).
TEST_F(SchedulerTest, APushingSourceCopiesWithoutAWait) {
  const std::vector<float> x = RandomFloats(8 * 3, 3);
  std::vector<float> results[2];
  std::vector<std::string> logs[2];
  for (int pushes = 0; pushes < 2; ++pushes) {
    Device* d0 =
        devices_.emplace_back(std::make_unique<PushingDevice>("P0", &logs[pushes], pushes)).get();
    Device* d1 =
        devices_.emplace_back(std::make_unique<PushingDevice>("P1", &logs[pushes], pushes)).get();
    Tensor* w0 = Weight(*d0, 8, 16, 1);
    Tensor* w1 = Weight(*d1, 16, 4, 2);
    auto s = MakeScheduler({d0, d1});
    auto m = BuildMlp(w0, w1);
    results[pushes] = RunMlp(*s, *m, x);
  }
  const std::vector<float> expected =
      OneDeviceMlp(Weight(dev0_, 8, 16, 1), Weight(dev0_, 16, 4, 2), x);
  EXPECT_THAT(results[1], ElementsAreArray(expected));
  EXPECT_THAT(results[0], ElementsAreArray(expected));
  // The last two entries are the end of the graph, which waits for both devices.
  EXPECT_THAT(logs[1], ::testing::ElementsAre("compute P0", "push P0->P1", "compute P1", "sync P0",
                                              "sync P1"));
  EXPECT_THAT(logs[0], ::testing::Contains("sync P1"));
  EXPECT_THAT(logs[0], ::testing::Not(::testing::Contains(HasSubstr("push"))));
}

// A column slice (a strided view) of a result in device memory crosses to the CPU through
// host memory as its rows only, in one 2D read, and gives the one-device result.
TEST_F(SchedulerTest, AStridedViewCrossesThroughTheHostAsItsRowsOnly) {
  NonHostDevice dev;
  auto build = [](Context& ctx, Tensor* w0, Tensor* w1, Tensor** x, Tensor** slice) {
    *x = NewInput(ctx, DType::kF32, {8, 3});
    Tensor* act = *Silu(ctx, *MulMat(ctx, w0, *x));  // [16, 3]
    // Elements 4..9 of each of the 3 rows: 24 bytes per row, 64 bytes apart.
    *slice = *View(ctx, act, {6, 3}, {act->nb[1]}, 4 * sizeof(float));
    return *Scale(ctx, *MulMat(ctx, w1, *slice), 2.0f);
  };
  const std::vector<float> xv = RandomFloats(8 * 3, 3);
  std::vector<float> want;
  {
    Context ctx;
    Tensor *x, *slice;
    Tensor* out = build(ctx, Weight(dev0_, 8, 16, 1), Weight(dev0_, 6, 4, 2), &x, &slice);
    want = OnCpu0(out, x, xv);
  }
  Context ctx;
  Tensor *x, *slice;
  Tensor* out = build(ctx, Weight(dev, 8, 16, 1), Weight(dev0_, 6, 4, 2), &x, &slice);
  Graph graph = *BuildGraph({out});
  auto s = MakeScheduler({&dev, &dev0_});
  auto g = *s->Schedule(graph);
  ASSERT_EQ(g->splits().size(), 2u);
  ASSERT_EQ(g->splits()[1].inputs.size(), 1u);
  EXPECT_EQ(g->splits()[1].inputs[0].src, slice);
  ASSERT_TRUE(g->SetInput(x, xv.data(), xv.size() * sizeof(float)).ok());
  const size_t before = dev.bytes_read();
  ASSERT_TRUE(s->Compute(*g).ok());
  EXPECT_EQ(dev.bytes_read() - before, 3 * 6 * sizeof(float));  // not the 152-byte span.
  EXPECT_THAT(ReadF32(*out), ElementsAreArray(want));
}

// x0 is last read on its own device long before another device copies it: its memory must
// not be reused by the nodes in between.
TEST_F(SchedulerTest, SourcesKeepTheirMemoryUntilCopied) {
  Tensor* w0 = Weight(dev0_, 8, 8, 1);
  Tensor* w1 = Weight(dev1_, 8, 8, 2);
  const std::vector<float> xv = RandomFloats(8 * 4, 3);
  std::vector<float> results[2];
  for (int run = 0; run < 2; ++run) {
    Context ctx;
    Tensor* x = NewInput(ctx, DType::kF32, {8, 4});
    Tensor* x0 = *MulMat(ctx, w0, x);
    Tensor* chain = x0;
    for (int i = 0; i < 4; ++i) chain = *Scale(ctx, chain, 0.5f, 1.0f);
    Tensor* out = *Add(ctx, chain, *MulMat(ctx, w1, x0));
    Graph graph = *BuildGraph({out});
    auto s = run == 0 ? MakeScheduler({&dev0_}) : MakeScheduler({&dev0_, &dev1_});
    auto g = *s->Schedule(graph);
    ASSERT_TRUE(g->SetInput(x, xv.data(), xv.size() * sizeof(float)).ok());
    ASSERT_TRUE(s->Compute(*g).ok());
    results[run] = ReadF32(*out);
  }
  EXPECT_THAT(results[1], ElementsAreArray(results[0]));
}

TEST_F(SchedulerTest, GraphIsUnchangedOutsideTheScheduler) {
  auto [s, m, g] = ScheduleMlp({&dev0_, &dev1_}, Weight(dev0_, 8, 16, 1), Weight(dev1_, 16, 4, 2));
  EXPECT_EQ(m->y1->src[1], m->slice);
  ASSERT_TRUE(s->Compute(*g).ok());
  EXPECT_EQ(m->y1->src[1], m->slice);
}

TEST_F(SchedulerTest, SetRowsRunsWhereItsDestinationLives) {
  Tensor* w0 = Weight(dev0_, 8, 4, 1);
  Tensor* cache = Weight(dev1_, 4, 6, 2);  // stands for a KV cache on device 1.
  cache->flags &= ~kFlagWeight;
  Context ctx;
  Tensor* x = NewInput(ctx, DType::kF32, {8, 2});
  Tensor* idx = NewInput(ctx, DType::kI32, {2});
  Tensor* rows = *MulMat(ctx, w0, x);  // [4, 2] on device 0.
  Tensor* written = *SetRows(ctx, cache, rows, idx);
  Tensor* seen = *View(ctx, written, {4, 3}, {cache->nb[1]}, 0);
  Tensor* out = *Scale(ctx, seen, 1.0f);
  Graph graph = *BuildGraph({out});
  auto s = MakeScheduler({&dev0_, &dev1_});
  auto g = *s->Schedule(graph);
  EXPECT_EQ(g->DeviceOf(rows), &dev0_);
  EXPECT_EQ(g->DeviceOf(written), &dev1_);
  EXPECT_EQ(g->DeviceOf(seen), &dev1_);
  EXPECT_EQ(g->DeviceOf(out), &dev1_);
  EXPECT_EQ(g->DeviceOf(idx), &dev1_);
  ASSERT_EQ(g->splits().size(), 2u);
  ASSERT_EQ(g->splits()[1].inputs.size(), 1u);
  EXPECT_EQ(g->splits()[1].inputs[0].src, rows);
  const std::vector<float> xv = RandomFloats(16, 5);
  const int32_t at[2] = {2, 0};
  ASSERT_TRUE(g->SetInput(x, xv.data(), xv.size() * sizeof(float)).ok());
  ASSERT_TRUE(g->SetInput(idx, at, sizeof(at)).ok());
  const std::vector<float> before = ReadF32(*cache);
  ASSERT_TRUE(s->Compute(*g).ok());
  const std::vector<float> r = ReadF32(*rows);
  const std::vector<float> c = ReadF32(*cache);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(c[2 * 4 + i], r[i]);           // row 0 of the batch went to cache row 2,
    EXPECT_EQ(c[0 * 4 + i], r[4 + i]);       // row 1 to cache row 0,
    EXPECT_EQ(c[1 * 4 + i], before[4 + i]);  // row 1 of the cache is untouched.
  }
  EXPECT_THAT(ReadF32(*out), ElementsAreArray(std::vector<float>(c.begin(), c.begin() + 12)));
}

TEST_F(SchedulerTest, InputReadInPlaceWhenTheDeviceCanUseItsMemory) {
  TestDevice gpu("GPU", AllOps, nullptr, /*private_memory=*/true);
  for (Device* second : std::vector<Device*>{&dev1_, &gpu}) {
    Tensor* w0 = Weight(dev0_, 8, 4, 1);
    Tensor* w1 = Weight(*second, 8, 4, 2);
    Context ctx;
    Tensor* x = NewInput(ctx, DType::kF32, {8, 2});
    Tensor* sum = *Add(ctx, *MulMat(ctx, w0, x), *MulMat(ctx, w1, x));
    Graph graph = *BuildGraph({sum});
    auto s = MakeScheduler({&dev0_, second});
    auto g = *s->Schedule(graph);
    ASSERT_EQ(g->DeviceOf(x), &dev0_);
    int copies_of_x = 0;
    for (const Split& split : g->splits()) {
      for (const SplitInput& in : split.inputs) copies_of_x += in.src == x;
    }
    // Host memory is shared by the CPU devices; the private-memory device needs a copy.
    EXPECT_EQ(copies_of_x, second == &gpu ? 1 : 0) << second->name();
    const std::vector<float> xv = RandomFloats(16, 7);
    ASSERT_TRUE(g->SetInput(x, xv.data(), xv.size() * sizeof(float)).ok());
    ASSERT_TRUE(s->Compute(*g).ok());
  }
}

// A view of an input on one device read by a node on a private-memory device (a pick reading
// its row of the positions) crosses as a copy: the input is no leaf of the second device's
// split, which a remote device would refuse (it holds only its own memory).
TEST_F(SchedulerTest, AViewOfAnotherDevicesInputIsNoLeafOfTheSplitReadingIt) {
  TestDevice gpu("GPU", AllOps, nullptr, /*private_memory=*/true);
  // x [8, 2] is read on CPU0; h on the GPU; then a view of x's second row, read on the GPU.
  auto build = [](Context& ctx, Tensor* w0, Tensor* w1, Tensor** x) {
    *x = NewInput(ctx, DType::kF32, {8, 2});
    Tensor* h = *MulMat(ctx, w1, *MulMat(ctx, w0, *x));  // [8, 2]
    Tensor* h_row = *View(ctx, h, {8, 1}, {h->nb[1]}, h->nb[1]);
    Tensor* x_row = *View(ctx, *x, {8, 1}, {(*x)->nb[1]}, (*x)->nb[1]);
    return *Add(ctx, h_row, x_row);
  };
  Tensor* w0 = Weight(dev0_, 8, 4, 1);
  const std::vector<float> xv = RandomFloats(16, 5);
  std::vector<float> want;
  {
    Context ctx;
    Tensor* x;
    Tensor* out = build(ctx, w0, Weight(dev0_, 4, 8, 2), &x);
    want = OnCpu0(out, x, xv);
  }
  Context ctx;
  Tensor* x;
  Tensor* out = build(ctx, w0, Weight(gpu, 4, 8, 2), &x);
  Graph graph = *BuildGraph({out});
  auto s = MakeScheduler({&dev0_, &gpu});
  auto g = *s->Schedule(graph);
  ASSERT_EQ(g->DeviceOf(x), &dev0_);
  ASSERT_EQ(g->splits().size(), 2u);
  const Split& on_gpu = g->splits()[1];
  for (const Tensor* leaf : on_gpu.graph.leafs) {
    EXPECT_NE(MemoryOwner(leaf), x) << "a leaf of the GPU's split lives in CPU0's memory";
  }
  for (const Tensor* node : on_gpu.graph.nodes) EXPECT_NE(MemoryOwner(node), x);
  ASSERT_TRUE(g->SetInput(x, xv.data(), xv.size() * sizeof(float)).ok());
  ASSERT_TRUE(s->Compute(*g).ok());
  EXPECT_THAT(ReadF32(*out), ElementsAreArray(want));
}

TEST_F(SchedulerTest, UnsupportedOpGoesToADeviceThatSupportsIt) {
  TestDevice no_silu("NOSILU", [](Op op) { return op != Op::kSilu; });
  Tensor* w0 = Weight(no_silu, 8, 16, 1);
  Tensor* w1 = Weight(no_silu, 16, 4, 2);
  const std::vector<float> x = RandomFloats(8 * 3, 3);
  const std::vector<float> expected = OneDeviceMlp(w0, w1, x);

  auto [s, m, g] = ScheduleMlp({&no_silu, &dev1_}, w0, w1);
  EXPECT_EQ(g->DeviceOf(m->y0), &no_silu);
  EXPECT_EQ(g->DeviceOf(m->act), &dev1_);
  EXPECT_EQ(g->DeviceOf(m->y1), &no_silu);
  EXPECT_EQ(g->splits().size(), 3u);
  ExpectMlpOutput(*s, *g, *m, x, expected);
}

TEST_F(SchedulerTest, NoDeviceSupportingAnOpIsAnError) {
  TestDevice a("A", [](Op op) { return op != Op::kSilu; });
  TestDevice b("B", [](Op op) { return op != Op::kSilu; });
  auto s = MakeScheduler({&a, &b});
  auto m = BuildMlp(Weight(a, 8, 16, 1), Weight(b, 16, 4, 2));
  absl::StatusOr<std::unique_ptr<ScheduledGraph>> g = s->Schedule(m->graph);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("no device supports SILU"));
  EXPECT_THAT(g.status().message(), HasSubstr("A, B"));
}

TEST_F(SchedulerTest, UpgradesToAHigherPriorityDeviceSharingTheMemory) {
  TestDevice blas(
      "BLAS", [](Op op) { return op == Op::kMulMat; }, dev0_.default_buffer_type());
  Tensor* w0 = Weight(dev0_, 8, 16, 1);
  Tensor* w1 = Weight(dev0_, 16, 4, 2);
  const std::vector<float> x = RandomFloats(8 * 3, 3);
  const std::vector<float> expected = OneDeviceMlp(w0, w1, x);

  auto [s, m, g] = ScheduleMlp({&blas, &dev0_}, w0, w1);
  EXPECT_EQ(g->DeviceOf(m->y0), &blas);  // pinned to CPU0 by w0, upgraded.
  EXPECT_EQ(g->DeviceOf(m->act), &dev0_);
  EXPECT_EQ(g->DeviceOf(m->y1), &blas);
  EXPECT_EQ(g->DeviceOf(m->out), &dev0_);
  ExpectMlpOutput(*s, *g, *m, x, expected);
}

TEST_F(SchedulerTest, WeightInMemoryTheDeviceCannotUseIsCopied) {
  TestDevice gpu(
      "GPU", [](Op op) { return op != Op::kMulMat; }, nullptr, /*private_memory=*/true);
  TestDevice other("OTHER", AllOps, nullptr, /*private_memory=*/true);
  Tensor* w = Weight(gpu, 8, 4, 1);
  const std::vector<float> xv = RandomFloats(16, 9);
  std::vector<float> results[2];
  for (int run = 0; run < 2; ++run) {
    Context ctx;
    Tensor* x = NewInput(ctx, DType::kF32, {8, 2});
    Tensor* y = *MulMat(ctx, w, x);
    Tensor* out = *Scale(ctx, y, 0.5f);
    Graph graph = *BuildGraph({out});
    auto s = run == 0 ? MakeScheduler({&dev0_}) : MakeScheduler({&gpu, &other});
    auto g = *s->Schedule(graph);
    if (run == 1) {
      EXPECT_EQ(g->DeviceOf(y), &other);    // the weight's device cannot run MUL_MAT,
      EXPECT_EQ(g->DeviceOf(out), &other);  // and the scale follows its readable input.
      ASSERT_EQ(g->splits().size(), 1u);
      ASSERT_EQ(g->splits()[0].inputs.size(), 1u);
      EXPECT_EQ(g->splits()[0].inputs[0].src, w);
    }
    ASSERT_TRUE(g->SetInput(x, xv.data(), xv.size() * sizeof(float)).ok());
    ASSERT_TRUE(s->Compute(*g).ok());
    results[run] = ReadF32(*out);
  }
  EXPECT_THAT(results[1], ElementsAreArray(results[0]));
}

// The CUDA backend's rule: a matrix product is worth moving to the GPU from a batch of 32.
bool LargeMulMat(const Tensor& node) { return node.op == Op::kMulMat && node.src[1]->ne[1] >= 32; }

// y = w x; out = y / 2 for a batch of `batch` columns.
struct Product {
  Context ctx;
  Tensor* x = nullptr;
  Tensor* y = nullptr;
  Tensor* out = nullptr;
  Graph graph;
};

std::unique_ptr<Product> BuildProduct(Tensor* w, int64_t batch) {
  auto p = std::make_unique<Product>();
  p->x = NewInput(p->ctx, DType::kF32, {w->ne[0], batch});
  p->y = *MulMat(p->ctx, w, p->x);
  p->out = *Scale(p->ctx, p->y, 0.5f);
  p->graph = *BuildGraph({p->out});
  return p;
}

// Op offload (ggml's): a prompt-sized batch runs on the higher-priority device that asks for
// it, with the host weight copied there for the split; a decode-sized batch stays with the
// weight. Either way the result is one device's.
TEST_F(SchedulerTest, OffloadOpMovesALargeBatchToTheDeviceThatAsksForIt) {
  TestDevice gpu("GPU", AllOps, nullptr, /*private_memory=*/true, LargeMulMat);
  Tensor* w = Weight(dev0_, 64, 16, 1);
  for (int64_t batch : {4, 31, 32, 40}) {
    const std::vector<float> xv = RandomFloats(64 * batch, 11);
    auto one = MakeScheduler({&dev0_});
    auto ref = BuildProduct(w, batch);
    auto gr = *one->Schedule(ref->graph);
    ASSERT_TRUE(gr->SetInput(ref->x, xv.data(), xv.size() * sizeof(float)).ok());
    ASSERT_TRUE(one->Compute(*gr).ok());

    auto s = MakeScheduler({&gpu, &dev0_});
    auto p = BuildProduct(w, batch);
    auto g = *s->Schedule(p->graph);
    const bool offloaded = batch >= 32;
    EXPECT_EQ(g->DeviceOf(p->y), offloaded ? &gpu : &dev0_) << "batch " << batch;
    EXPECT_EQ(g->DeviceOf(p->out), offloaded ? &gpu : &dev0_) << "batch " << batch;
    EXPECT_EQ(g->DeviceOf(w), &dev0_);  // the weight stays where it is,
    int weight_copies = 0;              // and the offloaded split reads a copy of it.
    for (const Split& split : g->splits()) {
      for (const SplitInput& in : split.inputs) {
        if (in.src != w) continue;
        ++weight_copies;
        EXPECT_EQ(in.copy->buffer->type()->device(), &gpu);
      }
    }
    EXPECT_EQ(weight_copies, offloaded ? 1 : 0) << "batch " << batch;
    ASSERT_TRUE(g->SetInput(p->x, xv.data(), xv.size() * sizeof(float)).ok());
    ASSERT_TRUE(s->Compute(*g).ok());
    EXPECT_THAT(ReadF32(*p->out), ElementsAreArray(ReadF32(*ref->out))) << "batch " << batch;
  }
}

// Offload needs a device that supports the node, ranks above the weight's device, and a
// weight in host memory.
TEST_F(SchedulerTest, OffloadOpOnlyMovesToAHigherPriorityDeviceThatRunsTheNode) {
  TestDevice gpu("GPU", AllOps, nullptr, /*private_memory=*/true, LargeMulMat);
  TestDevice no_mul_mat(
      "NOMM", [](Op op) { return op != Op::kMulMat; }, nullptr, /*private_memory=*/true,
      [](const Tensor&) { return true; });
  Tensor* w = Weight(dev0_, 64, 16, 1);
  {
    auto s = MakeScheduler({&no_mul_mat, &dev0_});
    auto p = BuildProduct(w, 64);
    EXPECT_EQ((*s->Schedule(p->graph))->DeviceOf(p->y), &dev0_);
  }
  {
    auto s = MakeScheduler({&dev0_, &gpu});  // the weight's device comes first.
    auto p = BuildProduct(w, 64);
    EXPECT_EQ((*s->Schedule(p->graph))->DeviceOf(p->y), &dev0_);
  }
  {
    NonHostDevice dev;  // the weight in device memory stays with its device.
    Tensor* wd = Weight(dev, 64, 16, 2);
    auto s = MakeScheduler({&gpu, &dev});
    auto p = BuildProduct(wd, 64);
    EXPECT_EQ((*s->Schedule(p->graph))->DeviceOf(p->y), &dev);
  }
}

TEST_F(SchedulerTest, PipelinedGraphsMatchSequentialOnes) {
  Tensor* w0 = Weight(dev0_, 8, 16, 1);
  Tensor* w1 = Weight(dev1_, 16, 4, 2);
  constexpr int kGraphs = 6;
  std::vector<std::vector<float>> inputs, expected;
  auto seq = MakeScheduler({&dev0_, &dev1_});
  for (int i = 0; i < kGraphs; ++i) {
    inputs.push_back(RandomFloats(8 * 3, 100 + i));
    auto m = BuildMlp(w0, w1);
    expected.push_back(RunMlp(*seq, *m, inputs.back()));
  }
  for (int n_copies : {1, 2, 3}) {
    auto s = MakeScheduler({&dev0_, &dev1_}, n_copies);
    std::vector<std::unique_ptr<Mlp>> nets(kGraphs);
    std::vector<std::unique_ptr<ScheduledGraph>> in_flight(n_copies);
    std::vector<int> owner(n_copies, -1);
    auto finish = [&](int slot) {
      if (in_flight[slot] == nullptr) return;
      ASSERT_TRUE(s->Wait(*in_flight[slot]).ok());
      EXPECT_THAT(ReadF32(*nets[owner[slot]]->out), ElementsAreArray(expected[owner[slot]]));
      in_flight[slot].reset();
    };
    for (int i = 0; i < kGraphs; ++i) {
      const int slot = i % n_copies;
      finish(slot);
      nets[i] = BuildMlp(w0, w1);
      in_flight[slot] = *s->Schedule(nets[i]->graph, slot);
      owner[slot] = i;
      ASSERT_TRUE(in_flight[slot]->SetInput(nets[i]->x, inputs[i].data(), 8 * 3 * 4).ok());
      ASSERT_TRUE(s->Submit(*in_flight[slot]).ok());
    }
    for (int slot = 0; slot < n_copies; ++slot) finish(slot);
    EXPECT_EQ(s->stats().graphs, kGraphs);
    EXPECT_EQ(s->stats().splits, 2 * kGraphs);
  }
}

TEST_F(SchedulerTest, BusySlotIsRefused) {
  auto s = MakeScheduler({&dev0_, &dev1_}, 2);
  Tensor* w0 = Weight(dev0_, 8, 16, 1);
  Tensor* w1 = Weight(dev1_, 16, 4, 2);
  auto a = BuildMlp(w0, w1);
  auto b = BuildMlp(w0, w1);
  auto ga = *s->Schedule(a->graph, 0);
  ASSERT_TRUE(s->Submit(*ga).ok());
  absl::StatusOr<std::unique_ptr<ScheduledGraph>> gb = s->Schedule(b->graph, 0);
  EXPECT_EQ(gb.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Compute(*ga).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Schedule(b->graph, 2).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s->Wait(*ga).ok());
  EXPECT_TRUE(s->Schedule(b->graph, 0).ok());
}

TEST_F(SchedulerTest, RunTimeErrorNamesTheSplit) {
  Tensor* table = Weight(dev1_, 4, 5, 1);
  Tensor* w0 = Weight(dev0_, 8, 4, 2);
  for (bool pipelined : {false, true}) {
    Context ctx;
    Tensor* x = NewInput(ctx, DType::kF32, {8, 1});
    Tensor* ids = NewInput(ctx, DType::kI32, {1});
    Tensor* h = *MulMat(ctx, w0, x);           // CPU0
    Tensor* rows = *GetRows(ctx, table, ids);  // CPU1
    Tensor* out = *Add(ctx, *Scale(ctx, rows, 1.0f), *Scale(ctx, h, 1.0f));
    Graph graph = *BuildGraph({out});
    auto s = MakeScheduler({&dev0_, &dev1_}, 2);
    auto g = *s->Schedule(graph, 1);
    const int32_t bad = 7;  // the table has 5 rows.
    ASSERT_TRUE(g->SetInput(ids, &bad, sizeof(bad)).ok());
    absl::Status status;
    if (pipelined) {
      ASSERT_TRUE(s->Submit(*g).ok());
      status = s->Wait(*g);
    } else {
      status = s->Compute(*g);
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("on CPU1"));
  }
}

TEST_F(SchedulerTest, BadBackendsAreRefused) {
  auto stream0 = *dev0_.CreateStream();
  auto stream1 = *dev1_.CreateStream();
  EXPECT_EQ(Scheduler::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Scheduler::Create({{&dev0_, stream1.get()}}).status().message(),
              HasSubstr("belongs to CPU1"));
  EXPECT_THAT(
      Scheduler::Create({{&dev0_, stream0.get()}, {&dev0_, stream0.get()}}).status().message(),
      HasSubstr("listed twice"));
  EXPECT_EQ(Scheduler::Create({{&dev0_, nullptr}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scheduler::Create({{&dev0_, stream0.get()}}, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, InputsAreCheckedBySetInput) {
  auto [s, m, g] = ScheduleMlp({&dev0_, &dev1_}, Weight(dev0_, 8, 16, 1), Weight(dev1_, 16, 4, 2));
  float v = 0;
  EXPECT_EQ(g->SetInput(m->y0, &v, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g->SetInput(m->x, &v, 1 << 20).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tg
