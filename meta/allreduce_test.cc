// The generic all-reduce (meta/allreduce.h) against a naive sum: 1..5 devices, odd sizes,
// ring and butterfly, host-direct and staged through Get/SetTensor, BF16 on the wire; every
// rank must end with bit-identical values. Also: a family's own Collectives are used when
// offered, and bad input is an error on every rank (never a hang).
#include "meta/allreduce.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "core/context.h"
#include "gtest/gtest.h"
#include "tests/lib/test_util.h"

namespace tg::meta {
namespace {

using Algorithm = AllReduceOptions::Algorithm;

// n CPU devices with one f32 tensor of `count` elements each, filled with random values.
class Fixture {
 public:
  Fixture(int n, int64_t count) {
    for (int i = 0; i < n; ++i) {
      devices_.push_back(std::make_unique<cpu::CpuDevice>(absl::StrCat("R", i), "r", 1));
      Tensor* t = *ctx_.NewTensor(DType::kF32, {count});
      buffers_.push_back(*devices_.back()->default_buffer_type()->Allocate(t->NumBytes() + 64));
      EXPECT_TRUE(PlaceTensor(buffers_.back().get(), t, 0).ok());
      inputs_.push_back(testing::RandomFloats(count, 100 + i));
      EXPECT_TRUE(buffers_.back()->SetTensor(t, inputs_.back().data(), 0, count * 4).ok());
      tensors_.push_back(t);
    }
  }
  std::vector<Device*> devices() const {
    std::vector<Device*> d;
    for (const auto& x : devices_) d.push_back(x.get());
    return d;
  }
  std::vector<Tensor*>& tensors() { return tensors_; }
  std::vector<double> NaiveSum() const {
    std::vector<double> sum(inputs_[0].size(), 0.0);
    for (const auto& in : inputs_) {
      for (size_t i = 0; i < in.size(); ++i) sum[i] += in[i];
    }
    return sum;
  }
  std::vector<float> Read(int r) const {
    std::vector<float> v(tensors_[r]->NumElements());
    EXPECT_TRUE(buffers_[r]->GetTensor(tensors_[r], v.data(), 0, v.size() * 4).ok());
    return v;
  }

 private:
  Context ctx_;
  std::vector<std::unique_ptr<cpu::CpuDevice>> devices_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::vector<float>> inputs_;
  std::vector<Tensor*> tensors_;
};

void CheckSum(int n, int64_t count, AllReduceOptions options, double tol) {
  Fixture f(n, count);
  std::unique_ptr<AllReducer> reducer = *AllReducer::Create(f.devices(), options);
  const std::vector<double> want = f.NaiveSum();
  ASSERT_TRUE(reducer->Run(f.tensors()).ok());
  const std::vector<float> first = f.Read(0);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> got = r == 0 ? first : f.Read(r);
    EXPECT_EQ(got, first) << "rank " << r << " differs from rank 0";
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i])))
          << n << " ranks, " << count << " elements, " << reducer->AlgorithmFor(count * 4)
          << ", rank " << r << ", element " << i;
    }
  }
}

TEST(AllReduceTest, MatchesNaiveSum) {
  for (int n = 1; n <= 5; ++n) {
    for (int64_t count : {1, 3, 17, 1000, 4099, 70001}) {
      for (Algorithm a : {Algorithm::kRing, Algorithm::kButterfly, Algorithm::kAuto}) {
        for (bool staging : {false, true}) {
          AllReduceOptions o;
          o.algorithm = a;
          o.force_staging = staging;
          CheckSum(n, count, o, 1e-5);
        }
      }
    }
  }
}

TEST(AllReduceTest, Bf16OnTheWireStaysIdenticalAcrossRanks) {
  for (int n : {2, 3, 5}) {
    AllReduceOptions o;
    o.algorithm = Algorithm::kRing;
    o.bf16_min_bytes = 0;
    CheckSum(n, 5003, o, 2e-2);
  }
}

TEST(AllReduceTest, RepeatedCallsReuseBuffers) {
  Fixture f(3, 300);
  std::unique_ptr<AllReducer> reducer = *AllReducer::Create(f.devices());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reducer->Run(f.tensors()).ok());
  // Three sums of three ranks: 27 times the mean input, everywhere the same.
  EXPECT_EQ(f.Read(0), f.Read(2));
}

TEST(AllReduceTest, PicksAlgorithmBySize) {
  Fixture f(2, 4);
  AllReduceOptions o;
  o.ring_min_bytes = 1024;
  o.bf16_min_bytes = 1 << 20;
  std::unique_ptr<AllReducer> reducer = *AllReducer::Create(f.devices(), o);
  EXPECT_STREQ(reducer->AlgorithmFor(100), "butterfly");
  EXPECT_STREQ(reducer->AlgorithmFor(4096), "ring");
  EXPECT_STREQ(reducer->AlgorithmFor(2 << 20), "ring-bf16");
}

TEST(AllReduceTest, BadInputIsAnErrorOnEveryRank) {
  Fixture f(3, 10);
  Fixture g(1, 11);
  std::unique_ptr<AllReducer> reducer = *AllReducer::Create(f.devices());
  std::vector<Tensor*> mixed = f.tensors();
  mixed[1] = g.tensors()[0];
  EXPECT_EQ(reducer->Run(mixed).code(), absl::StatusCode::kInvalidArgument);
  std::vector<Tensor*> two = {f.tensors()[0], f.tensors()[1]};
  EXPECT_EQ(reducer->Run(two).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(AllReducer::Create({}).ok());
}

// A device family with its own all-reduce (as NCCL for CUDA): the meta device must use it.
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(int* calls) : calls_(calls) {}
  absl::Status AllReduce(absl::Span<Tensor* const> tensors) override {
    ++*calls_;
    const int64_t n = tensors[0]->NumElements();
    std::vector<float> sum(n, 0.0f);
    for (Tensor* t : tensors) {
      for (int64_t i = 0; i < n; ++i) sum[i] += static_cast<const float*>(t->data)[i];
    }
    for (Tensor* t : tensors) std::copy(sum.begin(), sum.end(), static_cast<float*>(t->data));
    return absl::OkStatus();
  }

 private:
  int* calls_;
};

class CountingCollectives : public Collectives {
 public:
  absl::StatusOr<std::unique_ptr<Communicator>> Init(absl::Span<Device* const>) override {
    return std::unique_ptr<Communicator>(new CountingCommunicator(&calls));
  }
  int calls = 0;
};

class CollectiveCpu : public cpu::CpuDevice {
 public:
  CollectiveCpu(const std::string& name, Collectives* c) : cpu::CpuDevice(name, name, 1), c_(c) {}
  Collectives* collectives() override { return c_; }

 private:
  Collectives* c_;
};

TEST(AllReduceTest, UsesTheFamilysCollectives) {
  CountingCollectives family;
  CollectiveCpu a("A", &family);
  CollectiveCpu b("B", &family);
  Context ctx;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Tensor*> tensors;
  for (Device* d : {static_cast<Device*>(&a), static_cast<Device*>(&b)}) {
    Tensor* t = *ctx.NewTensor(DType::kF32, {5});
    buffers.push_back(*d->default_buffer_type()->Allocate(64));
    ASSERT_TRUE(PlaceTensor(buffers.back().get(), t, 0).ok());
    const float v[5] = {1, 2, 3, 4, 5};
    ASSERT_TRUE(buffers.back()->SetTensor(t, v, 0, sizeof(v)).ok());
    tensors.push_back(t);
  }
  std::unique_ptr<AllReducer> reducer = *AllReducer::Create({&a, &b});
  EXPECT_STREQ(reducer->AlgorithmFor(20), "collectives");
  ASSERT_TRUE(reducer->Run(tensors).ok());
  EXPECT_EQ(family.calls, 1);
  EXPECT_EQ(static_cast<float*>(tensors[1]->data)[4], 10.0f);
  AllReduceOptions generic;
  generic.use_collectives = false;
  EXPECT_STREQ((*AllReducer::Create({&a, &b}, generic))->AlgorithmFor(20), "butterfly");
}

}  // namespace
}  // namespace tg::meta
