// KvCache: per-layer K and V tensors [n_embd_kv, n_ctx], one row per position (F16 by
// default, F32 as an option), each layer's on that layer's device (--split-mode layer) with
// one buffer per device. Positions map 1:1 to cells; the attention mask hides cells past the
// current position, so clearing needs no memset. Not thread-safe.
#ifndef TENSORGRID_MODELS_KV_CACHE_H_
#define TENSORGRID_MODELS_KV_CACHE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/context.h"
#include "models/llama_hparams.h"
#include "models/llama_model.h"

namespace tg {

class KvCache {
 public:
  // Every layer on `device`.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const LlamaHParams& hp, int64_t n_ctx,
                                                         DType type, Device* device);
  // Layer il on layer_devices[il] (one per layer).
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const LlamaHParams& hp, int64_t n_ctx,
                                                         DType type,
                                                         const std::vector<Device*>& layer_devices);
  // Each layer's cache beside its weights (the model's device, or its layer's in a split).
  static absl::StatusOr<std::unique_ptr<KvCache>> ForModel(const LlamaModel& model,
                                                           int64_t n_ctx, DType type);
  Tensor* k(int64_t layer) const { return k_[layer]; }
  Tensor* v(int64_t layer) const { return v_[layer]; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_layer() const { return static_cast<int64_t>(k_.size()); }
  DType type() const { return type_; }
  size_t bytes() const;

 private:
  KvCache() = default;
  int64_t n_ctx_ = 0;
  DType type_ = DType::kF16;
  Context ctx_;
  std::vector<Tensor*> k_;
  std::vector<Tensor*> v_;
  std::vector<std::unique_ptr<Buffer>> buffers_;  // one per device.
};

}  // namespace tg

#endif  // TENSORGRID_MODELS_KV_CACHE_H_
