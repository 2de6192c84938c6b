#include "models/kv_cells.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace tg {

int64_t KvCells::end() const {
  for (int64_t c = size(); c > 0; --c) {
    if (seqs_[c - 1] != 0) return c;
  }
  return 0;
}

absl::StatusOr<std::vector<int32_t>> KvCells::FindFree(int64_t n, int seq) const {
  if (n > size() - used_) {
    return absl::OutOfRangeError(absl::StrFormat(
        "KV cache full: sequence %d needs %d cells, %d of %d are free (raise -c, or end a "
        "sequence)",
        seq, n, size() - used_, size()));
  }
  std::vector<int32_t> cells;
  cells.reserve(n);
  for (int32_t c = 0; static_cast<int64_t>(cells.size()) < n; ++c) {
    if (seqs_[c] == 0) cells.push_back(c);
  }
  return cells;
}

void KvCells::Assign(int32_t cell, int seq, int32_t pos) {
  if (seqs_[cell] == 0) ++used_;
  seqs_[cell] = uint64_t{1} << seq;
  pos_[cell] = pos;
}

void KvCells::Remove(int seq) {
  const uint64_t bit = uint64_t{1} << seq;
  for (int64_t c = 0; c < size(); ++c) {
    if ((seqs_[c] & bit) == 0) continue;
    seqs_[c] &= ~bit;
    if (seqs_[c] == 0) {
      pos_[c] = -1;
      --used_;
    }
  }
}

void KvCells::SharePrefix(int src, int dst, int32_t n_pos) {
  const uint64_t from = uint64_t{1} << src, to = uint64_t{1} << dst;
  for (int64_t c = 0; c < size(); ++c) {
    if ((seqs_[c] & from) != 0 && pos_[c] < n_pos) seqs_[c] |= to;
  }
}

std::vector<int32_t> KvCells::CellsOf(int seq) const {
  std::vector<int32_t> cells;
  for (int32_t c = 0; c < size(); ++c) {
    if (Holds(c, seq)) cells.push_back(c);
  }
  std::sort(cells.begin(), cells.end(), [&](int32_t a, int32_t b) { return pos_[a] < pos_[b]; });
  return cells;
}

}  // namespace tg
