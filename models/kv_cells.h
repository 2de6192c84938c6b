// KvCells: which sequences each cell of a KV cache holds, and at which position — the
// bookkeeping of a cache shared by many sequences (llama.cpp's unified cells). A cell holds
// one position's K and V rows for every layer; it belongs to a set of sequences (up to
// kMaxSequences), more than one when sequences share a prefix, and is free when the set is
// empty. A token of sequence s at position p attends exactly the cells of s at positions
// <= p (and, in sliding-window layers, > p - n_swa). Not thread-safe.
#ifndef TENSORGRID_MODELS_KV_CELLS_H_
#define TENSORGRID_MODELS_KV_CELLS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tg {

class KvCells {
 public:
  // Sequences one cache holds at once (a cell's set is a 64-bit mask).
  static constexpr int kMaxSequences = 64;

  explicit KvCells(int64_t n_cells) : pos_(n_cells, -1), seqs_(n_cells, 0) {}

  int64_t size() const { return static_cast<int64_t>(pos_.size()); }
  int64_t used() const { return used_; }  // cells that belong to a sequence.
  // One past the highest cell in use (0 when none): what attention must cover.
  int64_t end() const;

  // `n` free cells, lowest first, for sequence `seq` (named in the error): OUT_OF_RANGE
  // naming the cells asked for, the free ones and the size when there are too few. The
  // cells stay free until Assign.
  absl::StatusOr<std::vector<int32_t>> FindFree(int64_t n, int seq) const;
  // Cell `cell` holds position `pos` of sequence `seq` (and no other sequence).
  void Assign(int32_t cell, int seq, int32_t pos);
  // Sequence `seq` leaves every cell; cells no other sequence holds become free.
  void Remove(int seq);
  // Sequence `dst` holds, besides its own, the cells of `src` at positions < n_pos (a shared
  // prefix: the same K and V rows serve both).
  void SharePrefix(int src, int dst, int32_t n_pos);
  // Cells of `seq`, ordered by position.
  std::vector<int32_t> CellsOf(int seq) const;

  bool Holds(int32_t cell, int seq) const { return (seqs_[cell] >> seq) & 1; }
  int32_t pos(int32_t cell) const { return pos_[cell]; }
  // Whether a token of `seq` at `pos` attends `cell`; n_swa > 0: only the last n_swa
  // positions (a sliding-window layer).
  bool Visible(int32_t cell, int seq, int32_t pos, int64_t n_swa = 0) const {
    if (!Holds(cell, seq) || pos_[cell] > pos) return false;
    return n_swa <= 0 || pos - pos_[cell] < n_swa;
  }

 private:
  std::vector<int32_t> pos_;    // -1: free.
  std::vector<uint64_t> seqs_;  // bit s: sequence s holds the cell.
  int64_t used_ = 0;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_KV_CELLS_H_
