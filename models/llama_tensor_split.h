// --split-mode tensor for llama-family models: the meta device over the plan's devices, with
// the split state of every weight and KV-cache tensor (attention q/k/v and ffn gate/up split
// by output rows in whole heads, attention output and ffn down by input columns, output head
// by vocabulary rows, KV cache by KV head, everything else mirrored). Mixture-of-experts
// weights (ffn_*_exps) are cut by the expert width F as the dense feed-forward is (gate/up
// rows, down input columns, whole quant blocks), or with --expert-split by whole experts
// (expert parallelism); the router (ffn_gate_inp) is mirrored.
//
// Granularity: attention is cut in whole KV heads, each with its n_head / n_head_kv query
// heads (q/k/v rows, biases, KV cache); the feed-forward in whole quant blocks of ffn_gate's
// type (gate/up rows). attn_output and ffn_down are cut along their input columns the same
// way, so that their products are partial sums for one all-reduce. Where attn_output's quant
// blocks would straddle a cut between heads (e.g. head_dim 48 in Q8_0 blocks of 32), heads go
// in groups that end on whole blocks (6 heads of 48 over two devices: 4 + 2) when no device
// gets more than 1.5x its share of the heads; otherwise attn_output is cut at the nearest
// whole blocks and the meta device regathers its input (one all-gather more per layer), as
// ffn_down is where its blocks are larger than ffn_gate's, whose blocks cut the feed-forward.
// With more devices than units (e.g. 4 devices, 3 KV heads) some devices get no heads:
// they still take their share of the feed-forward and output head (empty slices are
// supported throughout the meta device). Thread-safe.
#ifndef TENSORGRID_MODELS_LLAMA_TENSOR_SPLIT_H_
#define TENSORGRID_MODELS_LLAMA_TENSOR_SPLIT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/split_mode.h"
#include "meta/split_state.h"
#include "models/llama_hparams.h"

namespace tg {

// attn_output_block: the quant block of the attn_output weights (their largest, where layers
// differ; 1: any cut).
absl::StatusOr<std::unique_ptr<Device>> CreateTensorSplitDevice(const LlamaHParams& hp,
                                                                const DevicePlan& plan,
                                                                int64_t attn_output_block = 1);

// The split decisions behind CreateTensorSplitDevice, for `proportions.size()` devices
// (exposed for tests). Tensors are recognised by their GGUF names ("blk.3.attn_q.weight")
// and the KV cache's ("cache_k_l3"); anything else is mirrored.
// expert_split: whole experts per device instead of a share of every expert's width.
meta::SplitFn LlamaSplitFn(const LlamaHParams& hp, std::vector<float> proportions,
                           bool expert_split = false, int64_t attn_output_block = 1);

}  // namespace tg

#endif  // TENSORGRID_MODELS_LLAMA_TENSOR_SPLIT_H_
