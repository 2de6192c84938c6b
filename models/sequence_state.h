// SequenceState: one sequence's saved state — its tokens (position i holds tokens[i]), the
// last token's logits when kept, and every layer's K and V rows of those positions — and its
// file format. The rows are the logical cache rows (n_embd_kv values of the cache type each),
// whatever the device layout: a state saved under one split (one device, layers over
// several, KV heads over several, remote devices) restores under any other. The file names
// the model it belongs to (a fingerprint of its shape and weights' size) and the cache type;
// another model's, a truncated or a damaged file is INVALID_ARGUMENT naming what differs.
// Pure functions besides the cache reads and writes; thread-compatible.
#ifndef TENSORGRID_MODELS_SEQUENCE_STATE_H_
#define TENSORGRID_MODELS_SEQUENCE_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "models/kv_cache.h"
#include "models/llama_model.h"

namespace tg {

struct SequenceState {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [n_vocab] of the last token, or empty.
  // Per layer, tokens.size() rows of the cache type back to back.
  std::vector<std::string> k_rows;
  std::vector<std::string> v_rows;
};

// Reads the rows of `cells` (cells[i] holds position i) from every layer of `cache`;
// contiguous cells are read in one call (a tensor split's slices in place).
absl::StatusOr<SequenceState> CaptureSequence(const KvCache& cache, absl::Span<const int32_t> cells,
                                              absl::Span<const int32_t> tokens,
                                              absl::Span<const float> logits);
// Writes `state`'s rows into `cells` of every layer of `cache`.
absl::Status RestoreRows(const SequenceState& state, const KvCache& cache,
                         absl::Span<const int32_t> cells);

// The file: a header naming the format, the model and the cache type, then the tokens, the
// logits and the rows.
std::string EncodeSequenceState(const LlamaModel& model, const KvCache& cache,
                                const SequenceState& state);
absl::StatusOr<SequenceState> DecodeSequenceState(const LlamaModel& model, const KvCache& cache,
                                                  absl::string_view bytes);

// The longest prefix the saved tokens share with `tokens` (what a prompt cache reuses).
int64_t SharedPrefix(absl::Span<const int32_t> saved, absl::Span<const int32_t> tokens);

}  // namespace tg

#endif  // TENSORGRID_MODELS_SEQUENCE_STATE_H_
