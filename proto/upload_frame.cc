#include "proto/upload_frame.h"

#include <cstdint>

namespace tg::rpc {
namespace {

// Field 2 (chunk), wire type 2 (length-delimited).
constexpr uint8_t kChunkTag = (2 << 3) | 2;
constexpr int kMaxVarintBytes = 10;

}  // namespace

grpc::ByteBuffer ChunkFrame(const void* data, size_t size) {
  uint8_t prefix[1 + kMaxVarintBytes];
  size_t n = 0;
  prefix[n++] = kChunkTag;
  uint64_t v = size;
  do {
    prefix[n++] = static_cast<uint8_t>((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v != 0);
  grpc::Slice slices[2] = {grpc::Slice(prefix, n),
                           grpc::Slice(data, size, grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, size == 0 ? 1 : 2);
}

bool FindChunk(const grpc::ByteBuffer& message, std::vector<grpc::Slice>* slices,
               std::vector<absl::string_view>* parts) {
  slices->clear();
  parts->clear();
  if (!message.Dump(slices).ok()) return false;
  // Walks the prefix (tag, then a varint length) across slice boundaries.
  size_t slice = 0, pos = 0;
  auto next_byte = [&](uint8_t* b) {
    while (slice < slices->size() && pos == (*slices)[slice].size()) ++slice, pos = 0;
    if (slice == slices->size()) return false;
    *b = (*slices)[slice].begin()[pos++];
    return true;
  };
  uint8_t b = 0;
  if (!next_byte(&b) || b != kChunkTag) return false;
  uint64_t length = 0;
  int shift = 0;
  do {
    if (shift >= 7 * kMaxVarintBytes || !next_byte(&b)) return false;
    length |= uint64_t{b & 0x7fu} << shift;
    shift += 7;
  } while (b & 0x80);
  size_t rest = 0;
  for (size_t s = slice; s < slices->size(); ++s) rest += (*slices)[s].size();
  rest -= pos;
  if (rest != length) return false;  // trailing fields or a short chunk: let protobuf judge.
  for (size_t s = slice; s < slices->size(); ++s) {
    const grpc::Slice& sl = (*slices)[s];
    const size_t from = s == slice ? pos : 0;
    if (sl.size() > from) {
      parts->emplace_back(reinterpret_cast<const char*>(sl.begin()) + from, sl.size() - from);
    }
  }
  return true;
}

}  // namespace tg::rpc
