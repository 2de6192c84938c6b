#include "proto/model_identity.h"

#include <algorithm>

namespace tg::rpc {

ModelIdentity IdentityOf(absl::Span<const uint8_t> header, uint64_t file_size) {
  return {file_size, Sha256(header.data(), header.size())};
}

std::vector<FileRange> SplitIntoPieces(absl::Span<const FileRange> tensors) {
  std::vector<FileRange> sorted(tensors.begin(), tensors.end());
  std::sort(sorted.begin(), sorted.end(), [](const FileRange& a, const FileRange& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.size < b.size;
  });
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<FileRange> pieces;
  for (const FileRange& t : sorted) {
    for (uint64_t done = 0; done < t.size; done += kPieceBytes) {
      pieces.push_back({t.offset + done, std::min(kPieceBytes, t.size - done)});
    }
  }
  return pieces;
}

}  // namespace tg::rpc
