// LlamaModel: a llama-family model loaded from GGUF — hyperparameters, tokenizer, and the
// weights as tensors in device memory (checked against the shapes the architecture requires,
// loaded by LoadWeights, or used in place in the mapped file where the device's buffer type
// takes host memory): one device's, the meta device's (--split-mode tensor),
// or layer by layer on several devices (--split-mode layer, models/layer_placement.h), one
// weight buffer per device. Immutable after Load; thread-safe to read.
#ifndef TENSORGRID_MODELS_LLAMA_MODEL_H_
#define TENSORGRID_MODELS_LLAMA_MODEL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/split_mode.h"
#include "gguf/gguf_file.h"
#include "models/layer_placement.h"
#include "models/llama_hparams.h"
#include "models/moe_ffn.h"
#include "models/tokenizer.h"

namespace tg {

struct LlamaLayer {
  Tensor* attn_norm = nullptr;
  Tensor* wq = nullptr;
  Tensor* wk = nullptr;
  Tensor* wv = nullptr;
  Tensor* wo = nullptr;
  Tensor* bq = nullptr;  // qwen2, gpt-oss.
  Tensor* bk = nullptr;
  Tensor* bv = nullptr;
  Tensor* bo = nullptr;      // gpt-oss.
  Tensor* sinks = nullptr;   // gpt-oss: F32 [n_head], blk.N.attn_sinks.weight.
  Tensor* q_norm = nullptr;  // qwen3 only.
  Tensor* k_norm = nullptr;
  Tensor* ffn_norm = nullptr;
  Tensor* ffn_gate = nullptr;
  Tensor* ffn_up = nullptr;
  Tensor* ffn_down = nullptr;
  // Mixture of experts (hparams().moe(); then ffn_gate/up/down are absent): blk.N.ffn_*_exps
  // and the router blk.N.ffn_gate_inp (D = n_embd, F = n_ff_exp, E = n_expert), with
  // gpt-oss's biases.
  MoeFfnWeights moe;
};

// Whether weights that a device could use where they lie in the mapped model file (a CPU's)
// stay there or are copied into its buffers (--mmap on|off|auto).
enum class WeightMapping {
  // Copied where the kernel gives 2 MiB pages on request and the file's tensors take at most
  // half of the memory available (KeepsWeightsInPlace); else in place. The page cache holds a
  // file in whatever pages it read or wrote it in: a Q4_0 model just written, in small pages,
  // decoded at 0.93x of the same weights copied onto 2 MiB pages.
  kAuto,
  kInPlace,  // zero-copy: loads at once, shares the page cache with other processes.
  kCopy,     // into the device's buffers (a CPU's on 2 MiB pages where it can).
};

// Whether a load with `mapping` leaves weights in the mapping, for a file whose tensors take
// `tensor_bytes`: kAuto decides by TransparentHugePagesUsable() and HostMemoryAvailable().
bool KeepsWeightsInPlace(WeightMapping mapping, uint64_t tensor_bytes);

struct LoadOptions {
  // Where the weights go. An empty plan means one device: `device`, else the registry's CPU.
  DevicePlan plan;
  Device* device = nullptr;
  WeightMapping mapping = WeightMapping::kAuto;
  // Called with (bytes done, bytes total) as weights land, from any thread, one call at a time.
  std::function<void(size_t, size_t)> progress;
  // Called once every weight is in place: how each buffer's got there (LoadWeights,
  // core/load_weights.h) and the seconds the whole load took. May be empty.
  std::function<void(absl::Span<const LoadStats> stats, double seconds)> loaded;
};

// The mapped file as core's weight loading sees it: path, mapping, header and tensor extents.
WeightSource WeightSourceOf(const GgufFile& file);

class LlamaModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const std::string& path,
                                                          const LoadOptions& options = {});

  const LlamaHParams& hparams() const { return hparams_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The device graphs run on: the single device, or for --split-mode tensor the meta device
  // that spreads every tensor over the plan's devices. For --split-mode layer, the device of
  // the embeddings (graphs span placement().UsedDevices(); LlamaSession schedules them).
  Device* device() const { return device_; }
  // Where each layer's weights and KV cache live: every layer on device() unless the plan is
  // a layer split.
  const LayerPlacement& placement() const { return placement_; }
  // True when graphs of this model span several devices (a layer split over two or more).
  bool multi_device() const { return placement_.UsedDevices().size() > 1; }
  const DevicePlan& plan() const { return plan_; }
  const GgufFile& file() const { return *file_; }

  Tensor* tok_embd() const { return tok_embd_; }
  Tensor* output_norm() const { return output_norm_; }
  Tensor* output() const { return output_; }  // token_embd when the output is tied.
  const std::vector<LlamaLayer>& layers() const { return layers_; }

  size_t weight_bytes() const { return weight_bytes_; }
  int64_t n_params() const { return n_params_; }
  // A short description for tools: "llama 5L 64d q8_0".
  std::string Describe() const;

 private:
  LlamaModel() = default;
  absl::Status ChooseDevices(const LoadOptions& options);
  // A weight of the file on placement_.devices[device].
  absl::StatusOr<Tensor*> Weight(const std::string& name, std::initializer_list<int64_t> ne,
                                 int device, bool required = true);
  absl::Status CreateLayerWeights(int64_t il);
  absl::Status CreateWeights();
  absl::Status UploadWeights(const LoadOptions& options);
  // A read-only buffer over the file's tensor data for device d, when its buffer type takes
  // host memory (BufferType::FromHostPtr); null otherwise.
  absl::StatusOr<std::unique_ptr<Buffer>> MapTensorData(int d) const;

  std::unique_ptr<GgufFile> file_;
  DevicePlan plan_;
  std::unique_ptr<Device> owned_device_;  // the meta device of a tensor split.
  LlamaHParams hparams_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Device* device_ = nullptr;
  Context ctx_;
  struct FileWeight {
    Tensor* tensor;
    const GgufTensorInfo* info;
    int device;              // index into placement_.devices.
    bool duplicate = false;  // a second copy of a tensor (tied output on another device).
  };
  std::vector<FileWeight> weights_;
  LayerPlacement placement_;
  // Weights: per device, one buffer, or one over the mapping and one for the rest.
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Tensor* tok_embd_ = nullptr;
  Tensor* output_norm_ = nullptr;
  Tensor* output_ = nullptr;
  std::vector<LlamaLayer> layers_;
  size_t weight_bytes_ = 0;
  int64_t n_params_ = 0;
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_LLAMA_MODEL_H_
