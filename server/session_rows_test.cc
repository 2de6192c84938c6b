// WriteRows/ReadRows (2D reads and writes of a buffer's rows) in server/session and
// server/session_buffer, in-process: the bytes land where a hand-written byte loop puts
// them, on host memory and on device memory (through the backend's 2D call or its default
// row loop); every malformed request is refused before a byte moves and the session keeps
// working; a command this server does not know is UNIMPLEMENTED.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/server_testing.h"
#include "server/session.h"
#include "server/session_buffer.h"
#include "server/session_testing.h"
#include "tests/lib/strided_reference.h"

namespace tg::server {
namespace {

using testing::AllocRequest;
using testing::kInvalid;
using testing::kNotFound;
using testing::kOk;
using testing::kUnimplemented;
using testing::ReadRequest;
using testing::ReadRowsRequest;
using testing::RowsOf;
using testing::WriteRequest;
using testing::WriteRowsRequest;
namespace pb = ::tensorgrid::v1;

constexpr size_t kBufferBytes = 256;

std::string Pattern(size_t n, uint32_t seed) {
  const std::vector<uint8_t> v = tg::testing::BytePattern(n, seed);
  return std::string(v.begin(), v.end());
}

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

struct Shape {
  const char* what;
  uint64_t offset, row_size, n_rows, stride;
};

const Shape kShapes[] = {
    {"no rows", 0, 16, 0, 64},
    {"one row", 10, 20, 1, 0},
    {"packed rows (stride == row size)", 16, 32, 5, 32},
    {"a column slice", 8, 24, 4, 64},
    {"the last row ends at the buffer's end", 40, 24, 4, 64},  // 40 + 3 * 64 + 24 = 256.
};

StridedRange RangeOf(const Shape& s) { return {s.offset, s.row_size, s.n_rows, s.stride, 0}; }

// The buffer after writing `packed` into `before` through the rows, byte by byte.
std::string ReferenceWrite(const Shape& s, const std::string& before, const std::string& packed) {
  const std::vector<uint8_t> v =
      tg::testing::ReferenceSetRows(RangeOf(s), Bytes(before), Bytes(packed));
  return std::string(v.begin(), v.end());
}

std::string ReferenceRead(const Shape& s, const std::string& buffer) {
  const std::vector<uint8_t> v =
      tg::testing::ReferenceGetRows(RangeOf(s), Bytes(buffer), s.n_rows * s.row_size, 0);
  return std::string(v.begin(), v.end());
}

class SessionRowsTest : public testing::SessionEnvTest {
 protected:
  void SetUp() override {
    SessionEnvTest::SetUp();
    ASSERT_FALSE(HasFatalFailure());
    session_ = std::make_unique<Session>("rows", env_);
  }

  // A buffer of kBufferBytes on `device` holding Pattern(kBufferBytes, seed).
  uint64_t Filled(uint32_t device, int seed) {
    pb::SessionReply r = session_->Handle(AllocRequest(next_id_++, device, kBufferBytes));
    EXPECT_EQ(r.code(), kOk) << r.message();
    const uint64_t h = r.alloc_buffer().buffer();
    EXPECT_EQ(session_->Handle(WriteRequest(next_id_++, h, 0, Pattern(kBufferBytes, seed))).code(),
              kOk);
    return h;
  }

  std::string ReadAll(uint64_t h) {
    pb::SessionReply r = session_->Handle(ReadRequest(next_id_++, h, 0, kBufferBytes));
    EXPECT_EQ(r.code(), kOk) << r.message();
    return r.read().data();
  }

  std::unique_ptr<Session> session_;
  uint64_t next_id_ = 1;
};

TEST_F(SessionRowsTest, WriteAndReadRowsMoveTheBytesOfAByteLoop) {
  for (uint32_t device : {0u, 1u}) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(::testing::Message() << s.what << " on device " << device);
      const uint64_t h = Filled(device, 1);
      const std::string packed = Pattern(s.row_size * s.n_rows, 2);
      const pb::Rows rows = RowsOf(h, s.offset, s.row_size, s.n_rows, s.stride);
      pb::SessionReply w = session_->Handle(WriteRowsRequest(next_id_++, rows, packed));
      ASSERT_EQ(w.code(), kOk) << w.message();
      const std::string after = ReadAll(h);
      EXPECT_EQ(after, ReferenceWrite(s, Pattern(kBufferBytes, 1), packed));
      pb::SessionReply r = session_->Handle(ReadRowsRequest(next_id_++, rows));
      ASSERT_EQ(r.code(), kOk) << r.message();
      EXPECT_EQ(r.read().data(), ReferenceRead(s, after));
    }
  }
}

TEST_F(SessionRowsTest, MalformedRowsAreRefusedBeforeAnyByteMoves) {
  const uint64_t h = Filled(0, 3);
  struct Bad {
    const char* what;
    pb::SessionRequest request;
    int code;
    const char* names;  // what the message must say.
  };
  const std::vector<Bad> bad = {
      {"the last row one byte past the end",
       WriteRowsRequest(1, RowsOf(h, 41, 24, 4, 64), Pattern(96, 4)), kInvalid, "offset 41"},
      {"an offset past the end", ReadRowsRequest(2, RowsOf(h, 300, 4, 1, 4)), kInvalid, "300"},
      {"overlapping rows", WriteRowsRequest(3, RowsOf(h, 0, 32, 3, 16), Pattern(96, 4)), kInvalid,
       "overlap"},
      {"more data than rows", WriteRowsRequest(4, RowsOf(h, 0, 8, 2, 16), Pattern(17, 4)), kInvalid,
       "17 bytes"},
      {"less data than rows", WriteRowsRequest(5, RowsOf(h, 0, 8, 2, 16), Pattern(15, 4)), kInvalid,
       "15 bytes"},
      {"rows whose packed size overflows",
       ReadRowsRequest(6, RowsOf(h, 0, 1ull << 40, 1ull << 40, 1ull << 40)), kInvalid, "overflow"},
      {"a span that overflows", ReadRowsRequest(7, RowsOf(h, 8, 2, 3, UINT64_MAX / 2)), kInvalid,
       "overflow"},
      {"a read above the inline limit",
       ReadRowsRequest(8, RowsOf(h, 0, 1024, rpc::kMaxInlineBytes / 1024 + 1, 1024)), kInvalid,
       "inline limit"},
      {"an unknown buffer", ReadRowsRequest(9, RowsOf(h + 1, 0, 4, 1, 4)), kNotFound, "handle"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    pb::SessionReply r = session_->Handle(b.request);
    EXPECT_EQ(r.code(), b.code) << r.message();
    EXPECT_NE(r.message().find(b.names), std::string::npos) << r.message();
    EXPECT_FALSE(r.has_read());
    EXPECT_EQ(ReadAll(h), Pattern(kBufferBytes, 3));
  }
  absl::Status st = testing::RunMatMulAddCheck(
      [&](const pb::SessionRequest& r) { return session_->Handle(r); }, 7);
  EXPECT_TRUE(st.ok()) << st;
}

TEST_F(SessionRowsTest, ACommandThisServerDoesNotKnowIsUnimplemented) {
  // Field 99 of SessionRequest: what an older server sees of a newer client's command.
  pb::SessionRequest probe;
  probe.set_id(5);
  std::string wire = probe.SerializeAsString();
  wire += std::string("\x98\x06\x01", 3);  // tag (99 << 3 | varint) = 792, value 1.
  pb::SessionRequest unknown;
  ASSERT_TRUE(unknown.ParseFromString(wire));
  pb::SessionReply r = session_->Handle(unknown);
  EXPECT_EQ(r.code(), kUnimplemented) << r.message();
  EXPECT_EQ(r.id(), 5u);
  pb::SessionRequest empty;  // no command at all stays malformed.
  empty.set_id(6);
  EXPECT_EQ(session_->Handle(empty).code(), kInvalid);
}

// Device memory (not host-addressable) for SessionBuffer: CPU buffers under this type, with
// or without their own 2D calls (without: core/backend.h's row loop).
class FakeDeviceType : public BufferType {
 public:
  explicit FakeDeviceType(BufferType* cpu) : cpu_(cpu) {}
  absl::string_view name() const override { return "FAKE_DEVICE"; }
  Device* device() const override { return cpu_->device(); }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override {
    return absl::UnimplementedError("not used");
  }
  size_t alignment() const override { return 1; }
  bool is_host() const override { return false; }

 private:
  BufferType* cpu_;
};

TEST_F(SessionRowsTest, DeviceMemoryGoesThroughTheBackendsTwoDimensionalCall) {
  BufferType* cpu = env_.devices[0]->default_buffer_type();
  FakeDeviceType type(cpu);
  const Shape s{"a column slice", 8, 24, 4, 64};
  for (bool native : {true, false}) {
    SCOPED_TRACE(native ? "native 2D" : "default row loop");
    auto fake = std::make_unique<tg::testing::ForwardingBuffer>(*cpu->Allocate(kBufferBytes), &type,
                                                                native);
    tg::testing::ForwardingBuffer* raw = fake.get();
    SessionBuffer buf(std::move(fake), 0, kBufferBytes, nullptr);
    const std::string before = Pattern(kBufferBytes, 5);
    ASSERT_TRUE(buf.Write(0, before.data(), before.size()).ok());
    raw->calls_1d = raw->calls_2d = 0;
    const std::string packed = Pattern(s.row_size * s.n_rows, 6);
    const StridedRange r{s.offset, s.row_size, s.n_rows, s.stride, 0};
    ASSERT_TRUE(buf.WriteRows(r, packed.data()).ok());
    EXPECT_EQ(raw->calls_2d, native ? 1 : 0);
    EXPECT_EQ(raw->calls_1d, native ? 0 : 4);
    std::string after(kBufferBytes, '\0');
    ASSERT_TRUE(buf.Read(0, after.data(), after.size()).ok());
    EXPECT_EQ(after, ReferenceWrite(s, before, packed));
    std::string back(packed.size(), '\0');
    ASSERT_TRUE(buf.ReadRows(r, back.data()).ok());
    EXPECT_EQ(back, ReferenceRead(s, after));
    EXPECT_EQ(buf.WriteRows({41, 24, 4, 64, 0}, packed.data()).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace tg::server
