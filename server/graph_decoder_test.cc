// Tests of server/graph_decoder: a valid graph decodes and computes correctly; every kind of
// malformed graph is rejected with the right status code and nothing runs.
#include "server/graph_decoder.h"

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/server_testing.h"

namespace tg::server {
namespace {

using tensorgrid::v1::GraphDesc;
using testing::DescBuilder;
using testing::F32Bits;
using testing::MatMulAdd;
using testing::SampleGraph;
using testing::SampleSlots;

class GraphDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = testing::TwoCpuDevices();
    ASSERT_EQ(devices_.size(), 2u);
    for (uint64_t h : {1, 2}) {
      auto b = devices_[h - 1]->default_buffer_type()->Allocate(4096);
      ASSERT_TRUE(b.ok());
      ASSERT_TRUE((*b)->Clear(0).ok());
      buffers_[h] = std::move(*b);
    }
    resolve_ = [this](uint64_t h) -> absl::StatusOr<ResolvedBuffer> {
      auto it = buffers_.find(h);
      if (it == buffers_.end()) return absl::NotFoundError("no such handle");
      return ResolvedBuffer{it->second.get(), 4096};
    };
  }

  absl::StatusCode Decode(const GraphDesc& desc, int device = 0) {
    return DecodeGraph(desc, devices_[device], resolve_).status().code();
  }

  // Decoding MatMulAdd's graph for CPU0 after `edit` (a fresh graph each call).
  absl::StatusCode DecodeEdited(const std::function<void(GraphDesc&)>& edit) {
    MatMulAdd mm(1);
    GraphDesc desc = mm.Graph(1);
    edit(desc);
    return Decode(desc);
  }

  // Expects decoding `desc` for CPU0 to fail INVALID_ARGUMENT with a message saying `says`.
  void ExpectRejected(const GraphDesc& desc, absl::string_view says) {
    auto decoded = DecodeGraph(desc, devices_[0], resolve_);
    ASSERT_FALSE(decoded.ok()) << "decoded; wanted a refusal saying " << says;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(decoded.status().message().find(says), std::string::npos)
        << decoded.status().message();
  }

  // Runs a decoded graph on a new stream of CPU0, where buffers_[1] is.
  absl::Status Compute(DecodedGraph& decoded) {
    absl::StatusOr<std::unique_ptr<Stream>> stream = devices_[0]->CreateStream();
    if (!stream.ok()) return stream.status();
    return (*stream)->Compute(decoded.graph);
  }

  // The bytes of buffer handle 1.
  uint8_t* Base() { return static_cast<uint8_t*>(buffers_[1]->base()); }

  std::vector<Device*> devices_;
  std::map<uint64_t, std::unique_ptr<Buffer>> buffers_;
  BufferResolver resolve_;
};

TEST_F(GraphDecoderTest, ValidGraphComputesLikeNaiveLoop) {
  MatMulAdd mm(7);
  auto decoded = DecodeGraph(mm.Graph(1), devices_[0], resolve_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ((*decoded)->graph.nodes.size(), 2u);
  EXPECT_EQ((*decoded)->graph.leafs.size(), 3u);
  EXPECT_EQ((*decoded)->handles, std::vector<uint64_t>{1});
  uint8_t* base = Base();
  std::memcpy(base + MatMulAdd::kAOff, mm.a.data(), mm.a.size() * 4);
  std::memcpy(base + MatMulAdd::kXOff, mm.x.data(), mm.x.size() * 4);
  std::memcpy(base + MatMulAdd::kBOff, mm.b.data(), mm.b.size() * 4);
  ASSERT_TRUE(Compute(**decoded).ok());
  std::vector<float> out(MatMulAdd::M * MatMulAdd::N);
  std::memcpy(out.data(), base + MatMulAdd::kOutOff, out.size() * 4);
  EXPECT_TRUE(testing::NearlyEqual(out, mm.Expected()));
}

TEST_F(GraphDecoderTest, EmptyGraphIsFine) {
  EXPECT_EQ(Decode(tensorgrid::v1::GraphDesc()), absl::StatusCode::kOk);
}

TEST_F(GraphDecoderTest, LeafOffsetOutsideBuffer) {
  MatMulAdd mm(1);
  auto desc = mm.Graph(1);
  desc.mutable_tensors(0)->set_offset(4096);  // A (128 bytes) at the end: outside.
  EXPECT_EQ(Decode(desc), absl::StatusCode::kInvalidArgument);
  desc.mutable_tensors(0)->set_offset(UINT64_MAX - 63);  // wraps around.
  EXPECT_EQ(Decode(desc), absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, LeafSizeOutsideBuffer) {
  DescBuilder g;
  g.Add(DType::kF32, {1024, 2, 1, 1}, Op::kNone, {}, 1, 0);  // 8 KiB in a 4 KiB buffer.
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, NodeOutputOutsideBuffer) {
  MatMulAdd mm(1);
  auto desc = mm.Graph(1);
  desc.mutable_tensors(4)->set_offset(4096 - 32);  // output of 48 bytes would overrun.
  EXPECT_EQ(Decode(desc), absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, OverflowingDims) {
  DescBuilder g;
  const uint32_t t = g.Add(DType::kF32, {4, 1, 1, 1}, Op::kNone, {}, 1, 0);
  g.At(t).set_ne(0, int64_t{1} << 62);
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
  g.At(t).set_ne(0, 1 << 20);
  g.At(t).set_ne(1, 1 << 20);
  g.At(t).set_ne(2, 1 << 20);  // elements overflow kMaxTensorBytes.
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
  g.At(t).set_ne(0, -4);
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
}

// Zero dims would reach shape rules that divide by a source's dims (MUL_MAT broadcasting).
TEST_F(GraphDecoderTest, ZeroDimensionsAreRejected) {
  DescBuilder g;
  const uint32_t a = g.Add(DType::kF32, {8, 4, 1, 1}, Op::kNone, {}, 1, 0);
  const uint32_t x = g.Add(DType::kF32, {8, 3, 1, 1}, Op::kNone, {}, 1, 256);
  g.Add(DType::kF32, {4, 3, 1, 1}, Op::kMulMat, {a, x}, 1, 512);
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kOk);
  g.At(a).set_ne(2, 0);
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, OverflowingStrides) {
  DescBuilder g;
  const uint32_t t = g.Add(DType::kF32, {4, 4, 1, 1}, Op::kNone, {}, 1, 0);
  g.At(t).set_nb(1, UINT64_MAX / 2);  // 3 * nb wraps.
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, StridesSmallerThanContiguous) {
  {  // leaf whose elements overlap.
    DescBuilder g;
    const uint32_t t = g.Add(DType::kF32, {4, 4, 1, 1}, Op::kNone, {}, 1, 0);
    g.At(t).set_nb(0, 2);
    EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
    g.At(t).set_nb(0, 4);
    g.At(t).set_nb(1, 8);  // rows of 16 bytes every 8 bytes: overlap.
    EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
    g.At(t).set_nb(1, 0);  // zero stride: broadcasting reads.
    EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
  }
  {  // a node whose strides do not match its op's rule.
    MatMulAdd mm(1);
    auto desc = mm.Graph(1);
    desc.mutable_tensors(3)->set_nb(1, 8);  // MUL_MAT result rows 16 bytes apart.
    EXPECT_EQ(Decode(desc), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(GraphDecoderTest, MisalignedData) {
  DescBuilder g;
  g.Add(DType::kF32, {4, 1, 1, 1}, Op::kNone, {}, 1, 2);  // f32 at an odd offset.
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, UnknownDType) {
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(0)->set_type(99); }),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, UnknownOp) {
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(4)->set_op(200); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) {
              d.mutable_tensors(4)->set_op(static_cast<uint32_t>(Op::kCount));
            }),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, CyclicGraphOrForwardReference) {
  MatMulAdd mm(1);
  auto desc = mm.Graph(1);
  desc.mutable_tensors(3)->set_src(1, 5);  // MUL_MAT reads the ADD after it.
  ExpectRejected(desc, "cyclic graph or forward reference");
  // itself:
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(3)->set_src(0, 4); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(3)->set_view_src(9); }),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, IdsMustBeInOrder) {
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(1)->set_id(7); }),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, MalformedFields) {
  const std::vector<std::function<void(GraphDesc&)>> invalid = {
      [](GraphDesc& d) { d.mutable_tensors(0)->add_ne(1); },  // 5 dims.
      [](GraphDesc& d) { d.mutable_tensors(0)->mutable_nb()->RemoveLast(); },
      [](GraphDesc& d) { d.mutable_tensors(3)->set_op_params(std::string(65, 'x')); },
      [](GraphDesc& d) {
        for (int i = 0; i < 3; ++i) d.mutable_tensors(3)->add_src(0);  // 5 source slots.
      },
      [](GraphDesc& d) {
        d.mutable_tensors(0)->add_src(0);
        d.mutable_tensors(1)->add_src(1);  // a leaf with a source.
      },
  };
  for (size_t i = 0; i < invalid.size(); ++i) {
    EXPECT_EQ(DecodeEdited(invalid[i]), absl::StatusCode::kInvalidArgument) << "edit " << i;
  }
  // A long name is truncated, not rejected.
  EXPECT_EQ(
      DecodeEdited([](GraphDesc& d) { d.mutable_tensors(0)->set_name(std::string(500, 'n')); }),
      absl::StatusCode::kOk);
}

TEST_F(GraphDecoderTest, ShapeRuleViolation) {
  // MUL_MAT of A[8,4] x B[4,3]: inner dims differ.
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(3)->set_src(1, 3); }),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, HandleProblems) {
  // Unknown / freed / another session's.
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(1)->set_buffer(42); }),
            absl::StatusCode::kNotFound);
  // A leaf without memory, a node without memory.
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(1)->set_buffer(0); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeEdited([](GraphDesc& d) { d.mutable_tensors(3)->set_buffer(0); }),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, BufferOnAnotherDevice) {
  MatMulAdd mm(1);
  auto desc = mm.Graph(1);
  desc.mutable_tensors(2)->set_buffer(2);  // CPU1's buffer in a graph for CPU0.
  EXPECT_EQ(Decode(desc, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode(mm.Graph(2), 1), absl::StatusCode::kOk);
  EXPECT_EQ(Decode(mm.Graph(2), 0), absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, NodeListProblems) {
  const std::vector<std::function<void(GraphDesc&)>> invalid = {
      [](GraphDesc& d) { d.mutable_nodes()->RemoveLast(); },  // ADD not listed.
      [](GraphDesc& d) { d.set_nodes(1, 4); },                // MUL_MAT twice.
      [](GraphDesc& d) { d.set_nodes(1, 1); },                // a leaf.
      [](GraphDesc& d) { d.set_nodes(1, 77); },               // no such tensor.
      [](GraphDesc& d) {
        d.set_nodes(0, 5);
        d.set_nodes(1, 4);  // ADD before the MUL_MAT it reads.
      },
  };
  for (size_t i = 0; i < invalid.size(); ++i) {
    EXPECT_EQ(DecodeEdited(invalid[i]), absl::StatusCode::kInvalidArgument) << "edit " << i;
  }
}

TEST_F(GraphDecoderTest, Views) {
  DescBuilder g;
  const uint32_t base = g.Add(DType::kF32, {16, 4, 1, 1}, Op::kNone, {}, 1, 0);
  const uint32_t view = g.Add(DType::kF32, {16, 2, 1, 1}, Op::kView, {base});
  g.At(view).set_view_src(base);
  g.At(view).set_view_offs(128);  // rows 2..3.
  const uint32_t out = g.Add(DType::kF32, {16, 2, 1, 1}, Op::kSilu, {view}, 1, 1024);
  (void)out;
  auto ok = DecodeGraph(g.desc(), devices_[0], resolve_);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(static_cast<uint8_t*>((*ok)->tensors[1]->data), Base() + 128);
  g.At(view).set_view_offs(192);  // past the base tensor's end.
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
  g.At(view).set_view_offs(128);
  g.At(view).set_nb(1, 0);  // overlapping view rows.
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
  g.At(view).set_nb(1, 64);
  g.At(view).set_view_src(0);  // a VIEW must alias.
  EXPECT_EQ(Decode(g.desc()), absl::StatusCode::kInvalidArgument);
}

TEST_F(GraphDecoderTest, TooManyTensors) {
  tensorgrid::v1::GraphDesc desc;
  const size_t n = rpc::kMaxGraphTensors + 1;
  for (size_t i = 0; i < n; ++i) desc.add_tensors()->set_id(static_cast<uint32_t>(i + 1));
  EXPECT_EQ(Decode(desc), absl::StatusCode::kInvalidArgument);
}

// Temperature 0 makes SAMPLE the argmax of the penalized rows, which the test computes itself:
// the server accepts the op and runs it with the penalty window it was given.
TEST_F(GraphDecoderTest, SampleDecodesAndRuns) {
  auto decoded = DecodeGraph(SampleGraph(1, SampleSlots(0.0f, 4.0f)), devices_[0], resolve_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const std::vector<float> logits = testing::Floats(16, 3);
  const int32_t pos[2] = {5, 6};
  uint8_t* base = Base();
  const auto top = [&](int row, float rp, int32_t penalized) {
    int best = 0;
    float best_v = -INFINITY;
    for (int i = 0; i < 8; ++i) {
      float v = logits[row * 8 + i];
      if (i == penalized) v = v > 0 ? v / rp : v * rp;
      if (v > best_v) best = i, best_v = v;
    }
    return best;
  };
  const int32_t recent[3] = {top(0, 1.0f, -1), -1, 99};  // -1 and 99: not ids, ignored.
  std::memcpy(base, logits.data(), logits.size() * 4);
  std::memcpy(base + 64, pos, sizeof(pos));
  std::memcpy(base + 128, recent, sizeof(recent));
  ASSERT_TRUE(Compute(**decoded).ok());
  int32_t got[2];
  std::memcpy(got, base + 256, sizeof(got));
  EXPECT_EQ(got[0], top(0, 4.0f, recent[0]));
  EXPECT_EQ(got[1], top(1, 4.0f, recent[0]));
  EXPECT_NE(got[0], recent[0]) << "the penalty did not move row 0's pick";
}

TEST_F(GraphDecoderTest, SampleParametersOutOfRangeAreRejected) {
  struct Case {
    int slot;
    int32_t value;
    const char* names;
  };
  const Case cases[] = {
      {0, F32Bits(NAN), "temperature is not finite"},
      {1, -3, "top_k -3"},
      {2, F32Bits(1.5f), "top_p 1.5"},
      {3, F32Bits(-0.1f), "min_p -0.1"},
      {4, F32Bits(0.0f), "repeat_penalty 0"},
      {4, F32Bits(INFINITY), "repeat_penalty is not finite"},
  };
  for (const Case& c : cases) {
    std::array<int32_t, 7> params = SampleSlots(0.8f, 1.1f);
    params[c.slot] = c.value;
    SCOPED_TRACE(absl::StrCat("slot ", c.slot));
    ExpectRejected(SampleGraph(1, params), c.names);
  }
  auto desc = SampleGraph(1, SampleSlots(0.8f, 1.0f));
  desc.mutable_tensors(1)->set_type(static_cast<uint32_t>(DType::kF32));  // positions: F32.
  EXPECT_EQ(Decode(desc), absl::StatusCode::kInvalidArgument);
  desc = SampleGraph(1, SampleSlots(0.8f, 1.0f));
  desc.mutable_tensors(1)->set_ne(0, 3);  // three positions for two rows.
  desc.mutable_tensors(1)->set_nb(1, 12);
  desc.mutable_tensors(1)->set_nb(2, 12);
  desc.mutable_tensors(1)->set_nb(3, 12);
  EXPECT_EQ(Decode(desc), absl::StatusCode::kInvalidArgument);
}

// The MoE router's ops reach the CPU through the server: TOP_K with k within the row, and
// its shape rule's bounds on k and ARGSORT's order enforced on nodes that did not come from
// the builder.
TEST_F(GraphDecoderTest, RouterOpsDecodeAndComputeAndBadParamsAreRejected) {
  auto router = [](int32_t k, Op op = Op::kTopK, int64_t out_rows = -1) {
    DescBuilder g;
    const uint32_t probs = g.Add(DType::kF32, {6, 2, 1, 1}, Op::kNone, {}, 1, 0);
    const int64_t rows = out_rows >= 0 ? out_rows : k;
    const uint32_t out = g.Add(DType::kI32, {rows, 2, 1, 1}, op, {probs}, 1, 64);
    g.At(out).set_op_params(&k, sizeof(k));
    return g.desc();
  };
  auto decoded = DecodeGraph(router(2), devices_[0], resolve_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const float probs[12] = {0.1f, 0.5f, 0.2f, 0.5f, 0.0f, -1.0f, 3, 2, 1, 4, 5, 6};
  uint8_t* base = Base();
  std::memcpy(base, probs, sizeof(probs));
  ASSERT_TRUE(Compute(**decoded).ok());
  int32_t ids[4];
  std::memcpy(ids, base + 64, sizeof(ids));
  // Row 0: the tie at 0.5 goes to the smaller index; row 1: 6 then 5.
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 5);
  EXPECT_EQ(ids[3], 4);

  for (int32_t k : {0, 7, -1}) {
    SCOPED_TRACE(absl::StrCat("k ", k));
    ExpectRejected(router(k, Op::kTopK, 1), "must be in [1, 6]");
  }
  ExpectRejected(router(2, Op::kArgsort, 6), "order 2 unknown");
  EXPECT_TRUE(DecodeGraph(router(1, Op::kArgsort, 6), devices_[0], resolve_).ok());
}

// gpt-oss's clamped SwiGLU reaches the CPU through the server, both clamps binding, and its
// shape rule refuses a limit that is not positive and finite on a node from the wire.
TEST_F(GraphDecoderTest, SwigluOaiDecodesAndComputesAndBadLimitIsRejected) {
  auto swiglu = [](float alpha, float limit) {
    DescBuilder g;
    const uint32_t gate = g.Add(DType::kF32, {4, 1, 1, 1}, Op::kNone, {}, 1, 0);
    const uint32_t up = g.Add(DType::kF32, {4, 1, 1, 1}, Op::kNone, {}, 1, 16);
    const uint32_t out = g.Add(DType::kF32, {4, 1, 1, 1}, Op::kSwigluOai, {gate, up}, 1, 64);
    const float params[2] = {alpha, limit};
    g.At(out).set_op_params(params, sizeof(params));
    return g.desc();
  };
  auto decoded = DecodeGraph(swiglu(1.702f, 7.0f), devices_[0], resolve_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const float in[8] = {-1.0f, 0.5f, 8.0f, 10.0f, -9.0f, 0.0f, 1.0f, 9.0f};
  uint8_t* base = Base();
  std::memcpy(base, in, sizeof(in));
  ASSERT_TRUE(Compute(**decoded).ok());
  float out[4];
  std::memcpy(out, base + 64, sizeof(out));
  // x = min(gate, 7), y = clamp(up, -7, 7): x sigmoid(1.702 x) (y + 1).
  const double x[4] = {-1, 0.5, 7, 7}, y[4] = {-7, 0, 1, 7};
  for (int i = 0; i < 4; ++i) {
    const double want = x[i] / (1 + std::exp(-1.702 * x[i])) * (y[i] + 1);
    EXPECT_NEAR(out[i], want, 1e-5 * (1 + std::abs(want))) << i;
  }
  for (float limit : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(absl::StrCat("limit ", limit));
    ExpectRejected(swiglu(1.702f, limit), "must be positive and finite");
  }
}

TEST(CheckedNumBytes, MatchesTensorNumBytes) {
  Tensor t;
  t.type = DType::kQ8_0;
  t.ne[0] = 64;
  t.ne[1] = 3;
  SetContiguousStrides(&t);
  auto b = CheckedNumBytes(t);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, t.NumBytes());
  t.nb[3] = UINT64_MAX;
  t.ne[3] = 2;
  EXPECT_FALSE(CheckedNumBytes(t).ok());
}

}  // namespace
}  // namespace tg::server
