// Work queued ahead on a remote device, against a real rpc-server on loopback (in-process):
// the stream's asynchronous reads, copies, events and batches, checked against values
// computed on the host; and LlamaSession::GenerateGreedy, which queues greedy steps (in
// batches) before the previous picks are back, against DecodeGreedy one step at a time on
// the local CPU.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/connection.h"
#include "client/remote_device.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "models/shared_model_path.h"
#include "server/rpc_server.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

using ::testing::ElementsAreArray;

// One rpc-server exposing the local CPU, and a client connection to it.
class RemotePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = testing::CpuDevice();
    ASSERT_NE(cpu_, nullptr);
    server::ServerConfig config;
    config.port = 0;
    config.devices = {cpu_};
    auto server = server::RpcServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    rpc::ClientOptions options;
    options.progress = false;
    auto connection = rpc::Connection::Open(server_->address(), options);
    ASSERT_TRUE(connection.ok()) << connection.status();
    family_ = std::make_unique<rpc::RemoteFamily>(std::move(*connection));
    remote_ = family_->devices().at(0);
    auto stream = remote_->CreateStream();
    ASSERT_TRUE(stream.ok());
    stream_ = std::move(*stream);
  }

  void TearDown() override {
    stream_.reset();
    family_.reset();
    if (server_ != nullptr) server_->Shutdown();
  }

  std::unique_ptr<Event> NewEvent() {
    auto event = remote_->CreateEvent();
    EXPECT_TRUE(event.ok()) << event.status();
    return event.ok() ? std::move(*event) : nullptr;
  }

  // A GET_ROWS of one row of a 3-row table on the server; table element i is value(i).
  struct RowPicker {
    Context ctx;
    Tensor* table = nullptr;
    Tensor* rows = nullptr;
    Tensor* picked = nullptr;
    Graph graph;
    std::unique_ptr<GraphAllocator> allocator;
    std::vector<float> values;
  };
  void SetUpRowPicker(RowPicker& p, float (*value)(int)) {
    p.table = *p.ctx.NewTensor(DType::kF32, {4, 3});
    p.rows = *p.ctx.NewTensor(DType::kI32, {1});
    p.table->flags |= kFlagInput;
    p.rows->flags |= kFlagInput;
    p.picked = *GetRows(p.ctx, p.table, p.rows);
    p.graph = *BuildGraph({p.picked});
    p.allocator = std::make_unique<GraphAllocator>(remote_->default_buffer_type());
    ASSERT_TRUE(p.allocator->Allocate(p.graph).ok());
    for (int i = 0; i < 12; ++i) p.values.push_back(value(i));
    ASSERT_TRUE(stream_->SetTensorAsync(p.table, p.values.data(), 0, 48).ok());
  }

  Device* cpu_ = nullptr;
  std::unique_ptr<server::RpcServer> server_;
  std::unique_ptr<rpc::RemoteFamily> family_;
  Device* remote_ = nullptr;
  std::unique_ptr<Stream> stream_;
};

std::vector<float> Sum(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

// c = a + b on the server, queued twice before either result is read.
TEST_F(RemotePipelineTest, ReadsQueuedBehindComputesGetTheirOwnStepsResult) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {8});
  Tensor* b = *ctx.NewTensor(DType::kF32, {8});
  a->flags |= kFlagInput;
  b->flags |= kFlagInput;
  Tensor* c = *Add(ctx, a, b);
  Graph graph = *BuildGraph({c});
  GraphAllocator allocator(remote_->default_buffer_type());
  ASSERT_TRUE(allocator.Allocate(graph).ok());

  const std::vector<float> a1 = {1, 2, 3, 4, 5, 6, 7, 8}, b1 = {8, 7, 6, 5, 4, 3, 2, 1};
  const std::vector<float> a2 = {-1, 0.5f, 9, 2, 2, 2, 1e3f, 0}, b2 = {3, 3, 3, 3, 3, 3, 3, 3};
  std::vector<float> out1(8, -7), out2(8, -7);
  std::unique_ptr<Event> e1 = NewEvent(), e2 = NewEvent();
  ASSERT_TRUE(stream_->SetTensorAsync(a, a1.data(), 0, 32).ok());
  ASSERT_TRUE(stream_->SetTensorAsync(b, b1.data(), 0, 32).ok());
  ASSERT_TRUE(stream_->Compute(graph).ok());
  ASSERT_TRUE(stream_->GetTensorAsync(c, out1.data(), 0, 32).ok());
  ASSERT_TRUE(stream_->RecordEvent(e1.get()).ok());
  ASSERT_TRUE(stream_->SetTensorAsync(a, a2.data(), 0, 32).ok());
  ASSERT_TRUE(stream_->SetTensorAsync(b, b2.data(), 0, 32).ok());
  ASSERT_TRUE(stream_->Compute(graph).ok());
  // Part of the second result only: a sub-range of the inline output.
  ASSERT_TRUE(stream_->GetTensorAsync(c, out2.data() + 2, 8, 16).ok());
  ASSERT_TRUE(stream_->RecordEvent(e2.get()).ok());

  ASSERT_TRUE(e1->Synchronize().ok());
  EXPECT_THAT(out1, ElementsAreArray(Sum(a1, b1)));
  ASSERT_TRUE(e2->Synchronize().ok());
  const std::vector<float> want2 = Sum(a2, b2);
  EXPECT_THAT(std::vector<float>(out2.begin() + 2, out2.begin() + 6),
              ElementsAreArray(want2.begin() + 2, want2.begin() + 6));
  EXPECT_EQ(out2[0], -7);                          // outside the range asked for.
  EXPECT_TRUE(stream_->WaitEvent(e1.get()).ok());  // same server: its commands run in order.

  // Not right after a Compute (a write is queued): the read goes in order behind the write.
  const std::vector<float> a3 = {4, 3, 2, 1, 0, -1, -2, -3};
  std::vector<float> back(8);
  ASSERT_TRUE(stream_->SetTensorAsync(a, a3.data(), 0, 32).ok());
  ASSERT_TRUE(stream_->GetTensorAsync(a, back.data(), 0, 32).ok());
  ASSERT_TRUE(stream_->RecordEvent(e1.get()).ok());
  ASSERT_TRUE(e1->Synchronize().ok());
  EXPECT_THAT(back, ElementsAreArray(a3));

  // A copy between two tensors of the server, then a read of the destination.
  ASSERT_TRUE(stream_->CopyTensorAsync(c, b).ok());
  ASSERT_TRUE(stream_->GetTensorAsync(b, back.data(), 0, 32).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  EXPECT_THAT(back, ElementsAreArray(want2));

  // Nothing to take from a tensor on another device.
  Context host;
  Tensor* local = *host.NewTensor(DType::kF32, {8});
  auto buffer = *cpu_->default_buffer_type()->Allocate(64);
  ASSERT_TRUE(PlaceTensor(buffer.get(), local, 0).ok());
  EXPECT_TRUE(absl::IsUnimplemented(stream_->CopyTensorAsync(local, a)));
  EXPECT_TRUE(absl::IsInvalidArgument(stream_->GetTensorAsync(local, back.data(), 0, 32)));
}

// An error on the server reaches the event behind the failing command, and the stream goes
// on working afterwards.
TEST_F(RemotePipelineTest, AnEventReportsTheErrorOfTheWorkBeforeIt) {
  RowPicker p;
  SetUpRowPicker(p, [](int i) { return static_cast<float>(i); });
  ASSERT_FALSE(HasFatalFailure());
  Tensor* rows = p.rows;
  Tensor* picked = p.picked;
  Graph& graph = p.graph;

  std::unique_ptr<Event> event = NewEvent();
  const int32_t bad = 7;  // the table has 3 rows.
  std::vector<float> out(4, -1);
  ASSERT_TRUE(stream_->SetTensorAsync(rows, &bad, 0, 4).ok());
  ASSERT_TRUE(stream_->Compute(graph).ok());
  ASSERT_TRUE(stream_->GetTensorAsync(picked, out.data(), 0, 16).ok());
  ASSERT_TRUE(stream_->RecordEvent(event.get()).ok());
  const absl::Status failed = event->Synchronize();
  EXPECT_TRUE(absl::IsInvalidArgument(failed)) << failed;

  const int32_t good = 2;
  ASSERT_TRUE(stream_->SetTensorAsync(rows, &good, 0, 4).ok());
  ASSERT_TRUE(stream_->Compute(graph).ok());
  ASSERT_TRUE(stream_->GetTensorAsync(picked, out.data(), 0, 16).ok());
  ASSERT_TRUE(stream_->RecordEvent(event.get()).ok());
  ASSERT_TRUE(event->Synchronize().ok());
  EXPECT_THAT(out, ElementsAreArray({8.0f, 9.0f, 10.0f, 11.0f}));
}

// Steps in one batch (held on the client, sent as one message) each get their own result,
// also past kMaxBatchCommands (the batch goes out when full); waiting for a held step, or a
// synchronous read, sends the batch first instead of waiting for ever; an error inside a
// batch reaches the event after it and the steps after it still run.
TEST_F(RemotePipelineTest, BatchedStepsGetTheirOwnResults) {
  RowPicker p;
  SetUpRowPicker(p, [](int i) { return static_cast<float>(i * i); });
  ASSERT_FALSE(HasFatalFailure());
  Tensor* rows = p.rows;
  Tensor* picked = p.picked;
  Graph& graph = p.graph;
  const std::vector<float>& values = p.values;

  constexpr int kSteps = rpc::SessionChannel::kMaxBatchCommands + 36;
  std::vector<std::vector<float>> out(kSteps, std::vector<float>(4, -1));
  std::vector<std::unique_ptr<Event>> events(kSteps);
  const int kBad = 50;  // this step's row is out of range.
  stream_->BeginBatch();
  for (int i = 0; i < kSteps; ++i) {
    const int32_t row = i == kBad ? 3 : i % 3;
    ASSERT_TRUE(stream_->SetTensorAsync(rows, &row, 0, 4).ok());
    ASSERT_TRUE(stream_->Compute(graph).ok());
    ASSERT_TRUE(stream_->GetTensorAsync(picked, out[i].data(), 0, 16).ok());
    events[i] = NewEvent();
    ASSERT_TRUE(stream_->RecordEvent(events[i].get()).ok());
    if (i == 5) {
      // Inside the batch: this step is still held, so the wait must send it.
      ASSERT_TRUE(events[5]->Synchronize().ok());
      EXPECT_THAT(out[5], ElementsAreArray(values.begin() + 8, values.begin() + 12));
      // A synchronous read goes behind the held write of the next row.
      const int32_t next = 1;
      int32_t back = -1;
      ASSERT_TRUE(stream_->SetTensorAsync(rows, &next, 0, 4).ok());
      ASSERT_TRUE(rows->buffer->GetTensor(rows, &back, 0, 4).ok());
      EXPECT_EQ(back, 1);
    }
  }
  ASSERT_TRUE(stream_->EndBatch().ok());
  for (int i = 0; i < kSteps; ++i) {
    const absl::Status s = events[i]->Synchronize();
    if (i == kBad) {
      EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
      continue;
    }
    ASSERT_TRUE(s.ok()) << "step " << i << ": " << s;
    const int row = i % 3;
    EXPECT_THAT(out[i], ElementsAreArray(values.begin() + 4 * row, values.begin() + 4 * row + 4))
        << "step " << i;
  }
  EXPECT_TRUE(stream_->Synchronize().ok());
}

// stories260K on the remote device: GenerateGreedy queues steps before the previous picks
// are read, feeding each pick back on the device, in batches of SessionOptions::greedy_batch
// (the parameter; 0: sized by the session). Its tokens must be DecodeGreedy's on the local
// CPU, one step at a time, across several KV blocks.
class RemoteGreedyTest : public RemotePipelineTest, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    path_ = DemoModelPath();
    if (!std::ifstream(path_).good()) GTEST_SKIP() << path_ << " not found";
    RemotePipelineTest::SetUp();
    LoadOptions local;
    local.device = cpu_;
    auto ref = LlamaModel::Load(path_, local);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref_model_ = std::move(*ref);
    LoadOptions on_server;
    on_server.device = remote_;
    auto model = LlamaModel::Load(path_, on_server);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }

  void TearDown() override {
    model_.reset();
    RemotePipelineTest::TearDown();
  }

  SessionOptions Options(int64_t n_ctx) const {
    SessionOptions so;
    so.n_ctx = n_ctx;
    so.kv_pad = 16;  // a new graph every 16 positions: the pipeline restarts there.
    so.kv_type = DType::kF32;
    so.greedy_batch = GetParam();
    return so;
  }

  // The prompt's greedy pick, then `n` DecodeGreedy steps on the local CPU.
  std::vector<int32_t> Reference(int64_t n, int64_t n_ctx, absl::Status* end = nullptr) {
    auto session = *LlamaSession::Create(*ref_model_, Options(n_ctx));
    std::vector<int32_t> out = {*session->DecodeGreedy(prompt_)};
    for (int64_t i = 0; i < n; ++i) {
      absl::StatusOr<int32_t> next = session->DecodeGreedy({&out.back(), 1});
      if (!next.ok()) {
        if (end != nullptr) *end = next.status();
        break;
      }
      out.push_back(*next);
    }
    return out;
  }

  // GenerateGreedy from got.back(), appending every pick to `got`; stops once `got` holds
  // `stop_at` tokens.
  static absl::Status Generate(LlamaSession& session, int64_t max_tokens, std::vector<int32_t>& got,
                               size_t stop_at = SIZE_MAX) {
    return session.GenerateGreedy(got.back(), max_tokens, [&](int32_t t) {
      got.push_back(t);
      return got.size() < stop_at;
    });
  }

  std::string path_;
  std::unique_ptr<LlamaModel> ref_model_, model_;
  const std::vector<int32_t> prompt_ = {1, 403, 407, 261, 378};
};

TEST_P(RemoteGreedyTest, GeneratesTheTokensOfDecodeGreedy) {
  const std::vector<int32_t> want = Reference(40, 128);
  auto session = *LlamaSession::Create(*model_, Options(128));
  std::vector<int32_t> got = {*session->DecodeGreedy(prompt_)};
  ASSERT_TRUE(Generate(*session, 40, got).ok());
  EXPECT_EQ(got, want);
  // The last pick is not decoded.
  EXPECT_EQ(session->n_past(), static_cast<int64_t>(prompt_.size()) + 40);
  EXPECT_EQ(*session->DecodeGreedy({&got.back(), 1}), Reference(41, 128).back());
}

TEST_P(RemoteGreedyTest, StoppingEarlyDiscardsTheStepQueuedAhead) {
  const std::vector<int32_t> want = Reference(30, 128);
  auto session = *LlamaSession::Create(*model_, Options(128));
  std::vector<int32_t> got = {*session->DecodeGreedy(prompt_)};
  // Stop at the 7th pick: the steps after it are on the server already.
  ASSERT_TRUE(Generate(*session, 40, got, /*stop_at=*/8).ok());
  ASSERT_EQ(got.size(), 8u);
  EXPECT_EQ(session->n_past(), static_cast<int64_t>(prompt_.size()) + 7);
  // Going on from there, one step at a time and then queued ahead again, continues the
  // same sequence: the discarded steps left nothing behind.
  got.push_back(*session->DecodeGreedy({&got.back(), 1}));
  ASSERT_TRUE(Generate(*session, 22, got).ok());
  EXPECT_EQ(got, want);
}

TEST_P(RemoteGreedyTest, AFullContextEndsWithOutOfRangeAfterTheSameTokens) {
  const int64_t n_ctx = static_cast<int64_t>(prompt_.size()) + 20;
  absl::Status ref_end;
  const std::vector<int32_t> want = Reference(100, n_ctx, &ref_end);
  ASSERT_TRUE(absl::IsOutOfRange(ref_end)) << ref_end;
  auto session = *LlamaSession::Create(*model_, Options(n_ctx));
  std::vector<int32_t> got = {*session->DecodeGreedy(prompt_)};
  const absl::Status end = Generate(*session, 100, got);
  EXPECT_TRUE(absl::IsOutOfRange(end)) << end;
  EXPECT_EQ(got, want);
  EXPECT_EQ(session->n_past(), n_ctx);
}

// 1: one step at a time, the next queued ahead; 3: batches that straddle the 16-position
// KV blocks; 16: more than a block; 0: as the session sizes them.
INSTANTIATE_TEST_SUITE_P(GreedyBatch, RemoteGreedyTest, ::testing::Values(1, 3, 16, 0));

}  // namespace
}  // namespace tg
