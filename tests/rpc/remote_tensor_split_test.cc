// The meta backend over devices of two rpc-servers (in-process, on loopback), with the
// all-reduce run by the servers among themselves: y = silu(x + W2 (W1 x)), W1 cut by rows
// and W2 by columns, so that one all-reduce sums W2's partial products before the silu. Checked against the same
// sum in double precision on the host, and for the messages it costs: each server gets the
// whole plan (its computes and its AllReduce) as one message per Compute, and no tensor
// passes through the client.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "client/client_metrics.h"
#include "client/client_test_util.h"
#include "client/remote_device.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "meta/meta_device.h"
#include "meta/meta_stream.h"
#include "meta/split_state.h"
#include "tests/lib/test_util.h"

namespace tg {
namespace {

constexpr int64_t kIn = 64;      // x: kIn x kTokens.
constexpr int64_t kHidden = 96;  // W1: kIn -> kHidden, cut by rows; W2: kHidden -> kIn, by columns.
constexpr int64_t kTokens = 2;

class RemoteTensorSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    Device* cpu = Registry::Get().CpuDevice();
    servers_.Start({cpu});
    servers_.Start({cpu});
    ASSERT_EQ(servers_.devices().size(), 2u);
    const std::vector<meta::AxisRange> halves = meta::ProportionalRanges(kHidden, 1, {0.5f, 0.5f});
    auto split = [halves](const Tensor& t) -> absl::StatusOr<meta::SplitState> {
      if (t.Name() == "w1") return meta::SplitState::Axis(1, halves);
      if (t.Name() == "w2") return meta::SplitState::Axis(0, halves);
      return meta::SplitState::Mirrored();
    };
    auto meta = meta::MetaDevice::Create(servers_.devices(), split);
    ASSERT_TRUE(meta.ok()) << meta.status();
    meta_ = std::move(*meta);
  }

  void TearDown() override {
    weights_.reset();
    meta_.reset();
    servers_.Stop();
  }

  rpc::Connection* ConnectionOf(int d) {
    return static_cast<rpc::RemoteDevice*>(servers_.devices()[d])->connection();
  }

  rpc::testing::LoopbackServers servers_;
  std::unique_ptr<meta::MetaDevice> meta_;
  std::unique_ptr<Buffer> weights_;
};

TEST_F(RemoteTensorSplitTest, ServersSumThePlanSentAsOneMessageEach) {
  const std::vector<float> w1 = testing::RandomFloats(kIn * kHidden, 1);
  const std::vector<float> w2 = testing::RandomFloats(kHidden * kIn, 2);
  Context weights_ctx;
  Tensor* tw1 = *weights_ctx.NewTensor(DType::kF32, {kIn, kHidden});
  Tensor* tw2 = *weights_ctx.NewTensor(DType::kF32, {kHidden, kIn});
  tw1->SetName("w1");
  tw2->SetName("w2");
  BufferType* bt = meta_->default_buffer_type();
  const size_t w2_at =
      (bt->AllocSize(*tw1) + bt->alignment() - 1) / bt->alignment() * bt->alignment();
  auto weights = bt->Allocate(w2_at + bt->AllocSize(*tw2));
  ASSERT_TRUE(weights.ok()) << weights.status();
  weights_ = std::move(*weights);
  weights_->set_usage(BufferUsage::kWeights);
  for (auto [t, at, v] : {std::tuple{tw1, size_t{0}, &w1}, std::tuple{tw2, w2_at, &w2}}) {
    t->flags |= kFlagWeight;
    ASSERT_TRUE(PlaceTensor(weights_.get(), t, at).ok());
    ASSERT_TRUE(weights_->SetTensor(t, v->data(), 0, v->size() * sizeof(float)).ok());
  }
  auto stream = meta_->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  GraphAllocator allocator(bt);

  const uint64_t staged_before = rpc::ClientMetrics::Get().allreduce_client_bytes.load();
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(run);
    const std::vector<float> x = testing::RandomFloats(kIn * kTokens, 10 + run);
    Context ctx;
    Tensor* tx = *ctx.NewTensor(DType::kF32, {kIn, kTokens});
    tx->SetName("x");
    tx->flags |= kFlagInput;
    Tensor* h = *MulMat(ctx, tw1, tx);
    Tensor* z = *MulMat(ctx, tw2, h);
    Tensor* y = *Silu(ctx, *Add(ctx, tx, z));
    auto graph = BuildGraph({y});
    ASSERT_TRUE(graph.ok()) << graph.status();
    ASSERT_TRUE(allocator.Allocate(*graph).ok());
    ASSERT_TRUE(tx->buffer->SetTensor(tx, x.data(), 0, x.size() * sizeof(float)).ok());

    const uint64_t sent0 = ConnectionOf(0)->messages_sent();
    const uint64_t sent1 = ConnectionOf(1)->messages_sent();
    absl::Status s = (*stream)->Compute(*graph);
    ASSERT_TRUE(s.ok()) << s;
    const meta::PartitionPlan* plan = static_cast<meta::MetaStream*>(stream->get())->last_plan();
    ASSERT_NE(plan, nullptr);
    EXPECT_EQ(plan->comm_count, 1);
    // The first run also asks each server for its grant (a call of its own).
    if (run > 0) {
      EXPECT_EQ(ConnectionOf(0)->messages_sent() - sent0, 1u);
      EXPECT_EQ(ConnectionOf(1)->messages_sent() - sent1, 1u);
    }

    std::vector<float> got(kIn * kTokens);
    ASSERT_TRUE(y->buffer->GetTensor(y, got.data(), 0, got.size() * sizeof(float)).ok());
    for (int64_t tok = 0; tok < kTokens; ++tok) {
      std::vector<double> hid(kHidden);
      for (int64_t j = 0; j < kHidden; ++j) {
        for (int64_t k = 0; k < kIn; ++k) hid[j] += double{w1[j * kIn + k]} * x[tok * kIn + k];
      }
      for (int64_t i = 0; i < kIn; ++i) {
        double want = x[tok * kIn + i], scale = std::fabs(want);
        for (int64_t j = 0; j < kHidden; ++j) {
          want += double{w2[i * kHidden + j]} * hid[j];
          scale += std::fabs(double{w2[i * kHidden + j]} * hid[j]);
        }
        want /= 1.0 + std::exp(-want);  // silu
        ASSERT_NEAR(got[tok * kIn + i], want, 1e-5 * scale) << "token " << tok << " row " << i;
      }
    }
  }
  EXPECT_EQ(rpc::ClientMetrics::Get().allreduce_client_bytes.load(), staged_before);
  EXPECT_GE(rpc::ClientMetrics::Get().allreduce_on_servers.load(), 3u);
}

}  // namespace
}  // namespace tg
