// RemoteBuffer::SetTensor2D/GetTensor2D against a real gRPC server on loopback: the bytes
// match a hand-written byte loop for every edge; a view costs one ReadRows command (one per
// kInlineWriteBytes of rows) where the row loop costs one read per row; a server of an
// older protocol minor (HelloReply.protocol_minor 0) gets the row loop and the same bytes;
// ranges outside the tensor are refused before anything is sent.
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/register_builtin.h"
#include "client/client_testing.h"
#include "client/connection.h"
#include "client/remote_device.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "proto/upload_frame.h"
#include "server/service.h"
#include "tests/lib/strided_reference.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

constexpr uint8_t kUntouched = 0xEE;

struct Case {
  const char* what;
  StridedRange r;
};

// Over a 64 x 16 f32 tensor (4096 bytes, rows of 256 bytes).
const Case kCases[] = {
    {"no rows", {0, 16, 0, 256, 0}},
    {"one row", {12, 20, 1, 0, 0}},
    {"packed rows (stride == row size)", {256, 512, 4, 512, 0}},
    {"packed rows to a host stride", {256, 100, 4, 100, 130}},
    {"a column slice of every row", {32, 64, 16, 256, 0}},
    {"a column slice to a host stride", {32, 64, 16, 256, 80}},
    {"the last row ends at the tensor's end", {192, 64, 16, 256, 0}},
};

// old_server: the server shows protocol minor 0.
class RemoteRowsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterBuiltinBackends().ok());
    server::ServiceOptions options;
    options.devices = {Registry::Get().CpuDevice()};
    int port = 0;
    if (GetParam()) {
      service_ = std::make_unique<testing::OlderMinorService>(options, 0);
    } else {
      service_ = std::make_unique<server::TensorGridService>(options);
    }
    server_ = testing::ServeOnLoopback(service_.get(), &port);
    ASSERT_NE(server_, nullptr);
    ClientOptions client;
    client.progress = false;
    auto connection = Connection::Open("127.0.0.1:" + std::to_string(port), client);
    ASSERT_TRUE(connection.ok()) << connection.status();
    connection_ = connection->get();
    EXPECT_EQ(connection_->hello().protocol_minor(), GetParam() ? 0u : kProtocolMinor);
    family_ = std::make_unique<RemoteFamily>(std::move(*connection));
    device_ = family_->devices().at(0);
  }

  void TearDown() override {
    tensors_.clear();
    buffers_.clear();
    family_.reset();
    if (server_ != nullptr) server_->Shutdown();
  }

  // A ne0 x ne1 f32 tensor in a remote buffer of its own, filled with BytePattern(.., seed).
  Tensor* Remote(int64_t ne0, int64_t ne1, int seed) {
    Tensor* t = *ctx_.NewTensor(DType::kF32, {ne0, ne1});
    t->SetName("remote");
    auto buffer = device_->default_buffer_type()->Allocate(t->NumBytes());
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_TRUE(PlaceTensor(buffer->get(), t, 0).ok());
    const std::vector<uint8_t> bytes = tg::testing::BytePattern(t->NumBytes(), seed);
    EXPECT_TRUE(t->buffer->SetTensor(t, bytes.data(), 0, bytes.size()).ok());
    buffers_.push_back(std::move(*buffer));
    return t;
  }

  std::vector<uint8_t> ReadAll(const Tensor* t) {
    std::vector<uint8_t> bytes(t->NumBytes());
    EXPECT_TRUE(t->buffer->GetTensor(t, bytes.data(), 0, bytes.size()).ok());
    return bytes;
  }

  // Commands sent to the server by `fn` (after everything before it went out).
  template <typename Fn>
  uint64_t CommandsFor(Fn fn) {
    EXPECT_TRUE(connection_->Drain().ok());
    const uint64_t before = connection_->last_sent_id();
    fn();
    EXPECT_TRUE(connection_->Drain().ok());
    return connection_->last_sent_id() - before;
  }

  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  Connection* connection_ = nullptr;
  std::unique_ptr<RemoteFamily> family_;
  Device* device_ = nullptr;
  Context ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<Tensor*> tensors_;
};

TEST_P(RemoteRowsTest, SetTensor2DMatchesAByteLoop) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    Tensor* t = Remote(64, 16, 1);
    const std::vector<uint8_t> host = tg::testing::BytePattern(4096, 2);
    ASSERT_TRUE(t->buffer->SetTensor2D(t, host.data(), c.r).ok());
    EXPECT_EQ(ReadAll(t),
              tg::testing::ReferenceSetRows(c.r, tg::testing::BytePattern(4096, 1), host));
  }
}

TEST_P(RemoteRowsTest, GetTensor2DMatchesAByteLoopInOneCommand) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    Tensor* t = Remote(64, 16, 3);
    std::vector<uint8_t> host(4096, kUntouched);
    const uint64_t commands = CommandsFor([&] {
      const absl::Status s = t->buffer->GetTensor2D(t, host.data(), c.r);
      EXPECT_TRUE(s.ok()) << s;
    });
    EXPECT_EQ(host, tg::testing::ReferenceGetRows(c.r, tg::testing::BytePattern(4096, 3),
                                                  host.size(), kUntouched));
    if (c.r.n_rows == 0 || c.r.row_size == 0) {
      EXPECT_EQ(commands, 0u);
    } else if (GetParam() && !c.r.TensorContiguous()) {
      EXPECT_EQ(commands, c.r.n_rows);  // the older server: one read per row.
    } else {
      EXPECT_EQ(commands, 1u);
    }
  }
}

TEST_P(RemoteRowsTest, ManyRowsGoInOneCommandPerInlineWriteBytes) {
  // 40 rows of 64 KiB, 96 KiB apart: 2.5 MiB of rows, 16 rows to a 1 MiB message.
  constexpr size_t kRow = size_t{64} << 10, kStride = size_t{96} << 10, kRows = 40;
  Tensor* t = Remote(kStride / 4, kRows, 4);
  const StridedRange r{0, kRow, kRows, kStride, 0};
  std::vector<uint8_t> host(kRow * kRows, kUntouched);
  const uint64_t commands = CommandsFor([&] {
    const absl::Status s = t->buffer->GetTensor2D(t, host.data(), r);
    EXPECT_TRUE(s.ok()) << s;
  });
  EXPECT_EQ(host, tg::testing::ReferenceGetRows(r, tg::testing::BytePattern(t->NumBytes(), 4),
                                                host.size(), kUntouched));
  EXPECT_EQ(commands, GetParam() ? kRows : 3u);
  const std::vector<uint8_t> in = tg::testing::BytePattern(kRow * kRows, 5);
  ASSERT_TRUE(t->buffer->SetTensor2D(t, in.data(), r).ok());
  EXPECT_EQ(ReadAll(t),
            tg::testing::ReferenceSetRows(r, tg::testing::BytePattern(t->NumBytes(), 4), in));
}

TEST_P(RemoteRowsTest, RangesOutsideTheTensorAreRefusedBeforeAnythingIsSent) {
  Tensor* t = Remote(64, 16, 6);
  std::vector<uint8_t> host(4096, kUntouched);
  const StridedRange past{193, 64, 16, 256, 0};  // the last row one byte past the end.
  const StridedRange overlap{0, 256, 4, 128, 0};
  uint64_t commands = CommandsFor([&] {
    EXPECT_EQ(t->buffer->GetTensor2D(t, host.data(), past).code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(t->buffer->SetTensor2D(t, host.data(), past).code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(t->buffer->GetTensor2D(t, host.data(), overlap).code(),
              absl::StatusCode::kInvalidArgument);
  });
  EXPECT_EQ(commands, 0u);
  EXPECT_EQ(host, std::vector<uint8_t>(4096, kUntouched));
  EXPECT_EQ(ReadAll(t), tg::testing::BytePattern(4096, 6));
}

INSTANTIATE_TEST_SUITE_P(NewAndOlderServer, RemoteRowsTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("OlderMinor") : std::string("Current");
                         });

}  // namespace
}  // namespace tg::rpc
