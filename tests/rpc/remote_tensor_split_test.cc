// The meta backend over devices of two rpc-servers (in-process, on loopback), with the
// all-reduce run by the servers among themselves: y = silu(x + W2 (W1 x)), W1 cut by rows
// and W2 by columns, so that one all-reduce sums W2's partial products before the silu.
// Checked against the same sum in double precision on the host, and for the messages it
// costs: each server gets the whole plan (its computes and its AllReduce) as one message per
// Compute, and no tensor passes through the client. With an RMS norm of W1 x in between, an
// all-gather joins the plan, run by the servers as a sum.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "client/client_metrics.h"
#include "client/client_testing.h"
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

  // Places W1 and W2 (random) in one weights buffer of the meta device.
  void PlaceWeights() {
    w1_ = testing::RandomFloats(kIn * kHidden, 1);
    w2_ = testing::RandomFloats(kHidden * kIn, 2);
    tw1_ = *weights_ctx_.NewTensor(DType::kF32, {kIn, kHidden});
    tw2_ = *weights_ctx_.NewTensor(DType::kF32, {kHidden, kIn});
    tw1_->SetName("w1");
    tw2_->SetName("w2");
    BufferType* bt = meta_->default_buffer_type();
    const size_t w2_at =
        (bt->AllocSize(*tw1_) + bt->alignment() - 1) / bt->alignment() * bt->alignment();
    auto weights = bt->Allocate(w2_at + bt->AllocSize(*tw2_));
    ASSERT_TRUE(weights.ok()) << weights.status();
    weights_ = std::move(*weights);
    weights_->set_usage(BufferUsage::kWeights);
    for (auto [t, at, v] : {std::tuple{tw1_, size_t{0}, &w1_}, std::tuple{tw2_, w2_at, &w2_}}) {
      t->flags |= kFlagWeight;
      ASSERT_TRUE(PlaceTensor(weights_.get(), t, at).ok());
      ASSERT_TRUE(weights_->SetTensor(t, v->data(), 0, v->size() * sizeof(float)).ok());
    }
  }

  // y = silu(x + W2 h), h = W1 x, or its RMS norm with `norm` (which needs the whole of h:
  // an all-gather), on the host in double precision; each value with the sum of the
  // magnitudes that make it (for the tolerance).
  void Reference(const std::vector<float>& x, bool norm, std::vector<double>* want,
                 std::vector<double>* scale) const {
    want->assign(kIn * kTokens, 0.0);
    scale->assign(kIn * kTokens, 0.0);
    for (int64_t tok = 0; tok < kTokens; ++tok) {
      std::vector<double> h(kHidden);
      double sq = 0;
      for (int64_t j = 0; j < kHidden; ++j) {
        for (int64_t k = 0; k < kIn; ++k) h[j] += double{w1_[j * kIn + k]} * x[tok * kIn + k];
        sq += h[j] * h[j];
      }
      if (norm) {
        for (double& v : h) v /= std::sqrt(sq / kHidden + kEps);
      }
      for (int64_t i = 0; i < kIn; ++i) {
        double v = x[tok * kIn + i], mag = std::fabs(v);
        for (int64_t j = 0; j < kHidden; ++j) {
          v += double{w2_[i * kHidden + j]} * h[j];
          mag += std::fabs(double{w2_[i * kHidden + j]} * h[j]);
        }
        (*want)[tok * kIn + i] = v / (1.0 + std::exp(-v));  // silu
        (*scale)[tok * kIn + i] = mag;
      }
    }
  }

  // Runs the graph three times (new x each time) on one stream, checking y against the
  // host; `per_run` (optional) is called after each Compute (and Synchronize) with its run
  // index.
  void RunAndCheck(bool norm, const std::function<void(int, const meta::PartitionPlan&)>& per_run) {
    auto stream = meta_->CreateStream();
    ASSERT_TRUE(stream.ok()) << stream.status();
    auto* meta_stream = static_cast<meta::MetaStream*>(stream->get());
    double compute_wall_us = 0, slowest_device_us = 0;
    GraphAllocator allocator(meta_->default_buffer_type());
    for (int run = 0; run < 3; ++run) {
      SCOPED_TRACE(run);
      const std::vector<float> x = testing::RandomFloats(kIn * kTokens, 10 + run);
      Context ctx;
      Tensor* tx = *ctx.NewTensor(DType::kF32, {kIn, kTokens});
      tx->SetName("x");
      tx->flags |= kFlagInput;
      Tensor* h = *MulMat(ctx, tw1_, tx);
      if (norm) h = *RmsNorm(ctx, h, kEps);
      Tensor* y = *Silu(ctx, *Add(ctx, tx, *MulMat(ctx, tw2_, h)));
      auto graph = BuildGraph({y});
      ASSERT_TRUE(graph.ok()) << graph.status();
      ASSERT_TRUE(allocator.Allocate(*graph).ok());
      ASSERT_TRUE(tx->buffer->SetTensor(tx, x.data(), 0, x.size() * sizeof(float)).ok());
      double device_before[2];
      for (int d = 0; d < 2; ++d) device_before[d] = meta_stream->device_stats(d).compute_us;
      const auto t0 = std::chrono::steady_clock::now();
      absl::Status s = (*stream)->Compute(*graph);  // only queues: the servers run it in order.
      if (s.ok()) s = (*stream)->Synchronize();
      compute_wall_us +=
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      ASSERT_TRUE(s.ok()) << s;
      double slowest = 0;
      for (int d = 0; d < 2; ++d) {
        slowest = std::max(slowest, meta_stream->device_stats(d).compute_us - device_before[d]);
      }
      slowest_device_us += slowest;
      const meta::PartitionPlan* plan = static_cast<meta::MetaStream*>(stream->get())->last_plan();
      ASSERT_NE(plan, nullptr);
      if (per_run) per_run(run, *plan);

      std::vector<float> got(kIn * kTokens);
      ASSERT_TRUE(y->buffer->GetTensor(y, got.data(), 0, got.size() * sizeof(float)).ok());
      std::vector<double> want, scale;
      Reference(x, norm, &want, &scale);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 * scale[i]) << "element " << i;
      }
    }
    // The stream's split of its time: compute is what the servers report for the slowest
    // device of each run (not the host's clocks, which see only the work being queued), the
    // rest of each plan's wall time (their all-reduce, latency) is transfer, and the two fit
    // in the time Compute and Synchronize took.
    const StreamStats stats = (*stream)->stats();
    EXPECT_GT(stats.compute_us, 0);
    EXPECT_NEAR(stats.compute_us, slowest_device_us, 1e-6 * slowest_device_us);
    EXPECT_GT(stats.transfer_us, 0);
    EXPECT_LE(stats.compute_us + stats.transfer_us, compute_wall_us);
  }

  // RunAndCheck, and that every collective ran on the servers with nothing through the
  // client, each server getting one message per Compute (after the first, which also asks
  // for the grants); `check_plan` looks at each run's plan.
  void RunOnServers(bool norm, const std::function<void(const meta::PartitionPlan&)>& check_plan) {
    rpc::ClientMetrics& metrics = rpc::ClientMetrics::Get();
    const uint64_t staged_before = metrics.allreduce_client_bytes.load();
    const uint64_t on_servers_before = metrics.allreduce_on_servers.load();
    uint64_t sent[2] = {ConnectionOf(0)->messages_sent(), ConnectionOf(1)->messages_sent()};
    int64_t comms = 0;
    RunAndCheck(norm, [&](int run, const meta::PartitionPlan& plan) {
      check_plan(plan);
      comms += plan.comm_count;
      for (int d = 0; d < 2; ++d) {
        const uint64_t now = ConnectionOf(d)->messages_sent();
        if (run > 0) {
          EXPECT_EQ(now - sent[d], 1u) << "server " << d;
        }
        sent[d] = now;
      }
    });
    EXPECT_EQ(metrics.allreduce_client_bytes.load(), staged_before);
    EXPECT_EQ(metrics.allreduce_on_servers.load() - on_servers_before,
              static_cast<uint64_t>(comms));
  }

  static constexpr float kEps = 1e-5f;
  std::vector<float> w1_, w2_;
  Context weights_ctx_;
  Tensor* tw1_ = nullptr;
  Tensor* tw2_ = nullptr;

  rpc::testing::LoopbackServers servers_;
  std::unique_ptr<meta::MetaDevice> meta_;
  std::unique_ptr<Buffer> weights_;
};

TEST_F(RemoteTensorSplitTest, ServersSumThePlanSentAsOneMessageEach) {
  PlaceWeights();
  RunOnServers(/*norm=*/false, [](const meta::PartitionPlan& plan) {
    EXPECT_EQ(plan.comm_count, 1);  // the all-reduce of W2's partial products.
  });
}

// With an RMS norm of W1 x, the plan all-gathers h (the norm needs all of it); over the
// servers that runs as an all-reduce of zero-padded slices, queued like the rest.
TEST_F(RemoteTensorSplitTest, AllGatherRunsAsASumOnTheServers) {
  PlaceWeights();
  RunOnServers(/*norm=*/true, [](const meta::PartitionPlan& plan) {
    int gathers = 0;
    for (const meta::PlanStep& step : plan.steps) {
      for (const meta::CommOp& op : step.comms) {
        gathers += op.kind == meta::CommOp::Kind::kAllGather;
      }
    }
    EXPECT_GE(gathers, 1);
  });
}

}  // namespace
}  // namespace tg
