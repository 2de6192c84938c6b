// The llama-family forward graph for one batch: token ids at consecutive positions are
// embedded, run through every layer (RMSNorm, attention with RoPE, GQA and the KV cache,
// SwiGLU feed-forward, or a mixture of experts: models/moe_ffn.h) and turned into logits for the
// requested rows.
#ifndef TENSORGRID_MODELS_LLAMA_GRAPH_H_
#define TENSORGRID_MODELS_LLAMA_GRAPH_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/ops.h"
#include "models/kv_cache.h"
#include "models/llama_model.h"

namespace tg {

// What a graph hands back: the logits, or only a pick per output row made on the device —
// its argmax (greedy decoding) or a token drawn by SAMPLE (docs/ops.md) — so that a remote
// device returns 4 bytes a row instead of n_vocab floats. The fed-back kinds (one token,
// one output) also copy the pick into the token input as the graph's last node, so the
// graph can run again for the next step without the host writing the token: steps queued
// ahead of their picks.
enum class GraphOutput { kLogits, kArgmax, kArgmaxFedBack, kSample, kSampleFedBack };

inline bool FeedsBack(GraphOutput o) {
  return o == GraphOutput::kArgmaxFedBack || o == GraphOutput::kSampleFedBack;
}
inline bool Samples(GraphOutput o) {
  return o == GraphOutput::kSample || o == GraphOutput::kSampleFedBack;
}

// How a graph that picks (any output but kLogits) does it, beyond its GraphOutput.
struct PickOptions {
  // The logits are read back as well (flagged as an output; a remote device then sends
  // them with the pick).
  bool keep_logits = false;
  SampleParams sample;  // kSample, kSampleFedBack.
  // The repetition penalty's window (kSample, kSampleFedBack; 0: none): the last
  // `penalty_window` tokens through the one whose logits are sampled, in `recent`, a
  // tensor the graph keeps up to date: I32 [>= penalty_window + 1] on the output device,
  // element 0 where the graph stages its pick, elements 1.. the window, newest first. The
  // graph pushes its (last row's) pick in front, so the next step finds its own token there.
  int64_t penalty_window = 0;
  Tensor* recent = nullptr;

  friend bool operator==(const PickOptions&, const PickOptions&) = default;
};

struct LlamaGraph {
  Context ctx;
  Graph graph;
  // Inputs the caller fills before compute (all flagged kFlagInput).
  Tensor* tokens = nullptr;   // I32 [n_tokens]
  Tensor* pos = nullptr;      // I32 [n_tokens]: each token's position (RoPE).
  Tensor* kv_idx = nullptr;   // I32 [n_tokens]: the cache cell each token's K and V go to.
  Tensor* mask = nullptr;     // F32 [n_kv, n_tokens]: 0 or -inf
  // Sliding-window layers' mask (hparams n_swa > 0), the causal mask that also hides cells
  // n_swa or more positions behind the token (llama.cpp's LLAMA_SWA_TYPE_STANDARD).
  Tensor* mask_swa = nullptr;
  Tensor* out_ids = nullptr;  // I32 [n_outputs], or nullptr when every row is an output.
  Tensor* logits = nullptr;   // F32 [n_vocab, n_outputs]
  Tensor* pick = nullptr;     // I32 [1, n_outputs]: ARGMAX or SAMPLE of the logits.
  // A batch that picks each output row its own way (models/batch_session.h): per row, its
  // pick (I32 [1]) and, for SAMPLE with a repetition penalty, its window input (I32 [W]).
  std::vector<Tensor*> row_picks;
  std::vector<Tensor*> row_windows;
  GraphOutput output = GraphOutput::kLogits;
  int64_t n_tokens = 0;
  int64_t n_kv = 0;
};

// The sizes a graph is built for: tokens in the batch, cache cells attended (cells
// [0, n_kv); the mask hides the others' and other sequences' cells) and output rows (the
// rows out_ids names; every row when it equals n_tokens).
struct LlamaGraphShape {
  int64_t n_tokens = 0;
  int64_t n_kv = 0;
  int64_t n_outputs = 0;
};

// llama.cpp's padding of n_kv: one decode graph serves 256 consecutive positions.
inline constexpr int64_t kDefaultKvPad = 256;

// The cache cells a batch of n_tokens at n_past attends: n_past + n_tokens rounded up to a
// multiple of kv_pad, at most n_ctx.
inline int64_t AttendedCells(int64_t n_ctx, int64_t n_past, int64_t n_tokens, int64_t kv_pad) {
  const int64_t padded = (n_past + n_tokens + kv_pad - 1) / kv_pad * kv_pad;
  return padded < n_ctx ? padded : n_ctx;
}

// One sequence's batch at n_past. n_outputs: 1 (the last row) or n_tokens (all rows). kv_pad
// rounds the attended cache length n_kv up to a multiple (capped at the context; the mask
// hides the extra cells), so that consecutive decode graphs are identical and a remote device
// can reuse the one it has.
absl::StatusOr<std::unique_ptr<LlamaGraph>> BuildLlamaGraph(
    const LlamaModel& model, const KvCache& cache, int64_t n_tokens, int64_t n_past,
    int64_t n_outputs, int64_t kv_pad = 1, GraphOutput output = GraphOutput::kLogits,
    const PickOptions& pick = {});

// Any batch (tokens of several sequences, models/batch_session.h): the caller fills pos,
// kv_idx, the masks and out_ids. A picking output picks every output row (ARGMAX; SAMPLE and
// a fed-back pick take one output row, or every row of the batch).
absl::StatusOr<std::unique_ptr<LlamaGraph>> BuildLlamaGraph(const LlamaModel& model,
                                                            const KvCache& cache,
                                                            const LlamaGraphShape& shape,
                                                            GraphOutput output,
                                                            const PickOptions& pick = {});

}  // namespace tg

#endif  // TENSORGRID_MODELS_LLAMA_GRAPH_H_
