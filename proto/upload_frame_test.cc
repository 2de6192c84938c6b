// Chunk frames are the protobuf encoding of UploadMessage{chunk}; FindChunk finds the chunk's
// bytes in any split into slices and leaves everything else to protobuf.
#include "proto/upload_frame.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::rpc {
namespace {

namespace pb = ::tensorgrid::v1;

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` cut into slices at every `step` bytes.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t step) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += step) {
    slices.emplace_back(bytes.data() + i, std::min(step, bytes.size() - i));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Joined(const std::vector<absl::string_view>& parts) {
  std::string out;
  for (absl::string_view p : parts) out.append(p.data(), p.size());
  return out;
}

TEST(UploadFrameTest, AFrameIsTheProtobufEncodingOfAChunk) {
  for (size_t size : {0, 1, 127, 128, 16383, 16384, 300001}) {
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7 + 3);
    pb::UploadMessage want;
    want.set_chunk(data);
    EXPECT_EQ(Flatten(ChunkFrame(data.data(), size)), want.SerializeAsString()) << size;
  }
}

TEST(UploadFrameTest, FindChunkReadsAnySplitIntoSlices) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i);
  pb::UploadMessage m;
  m.set_chunk(data);
  const std::string encoded = m.SerializeAsString();
  for (size_t step : {1, 2, 3, 7, 1000, 5000}) {
    std::vector<grpc::Slice> slices;
    std::vector<absl::string_view> parts;
    ASSERT_TRUE(FindChunk(Sliced(encoded, step), &slices, &parts)) << step;
    EXPECT_EQ(Joined(parts), data) << step;
  }
}

TEST(UploadFrameTest, EverythingElseIsLeftToProtobuf) {
  std::vector<grpc::Slice> slices;
  std::vector<absl::string_view> parts;
  pb::UploadMessage header;
  header.mutable_header()->set_size(5);
  EXPECT_FALSE(FindChunk(Sliced(header.SerializeAsString(), 4), &slices, &parts));
  EXPECT_FALSE(FindChunk(grpc::ByteBuffer(), &slices, &parts));  // an empty message.
  pb::UploadMessage chunk;
  chunk.set_chunk("abcdef");
  const std::string encoded = chunk.SerializeAsString();
  EXPECT_FALSE(FindChunk(Sliced(encoded.substr(0, 5), 2), &slices, &parts));  // cut short.
  EXPECT_FALSE(FindChunk(Sliced(encoded + encoded, 3), &slices, &parts));     // two fields.
  EXPECT_FALSE(
      FindChunk(Sliced(std::string("\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12), 5),
                &slices, &parts));  // a varint longer than 10 bytes.
}

}  // namespace
}  // namespace tg::rpc
