#include "models/kv_cache.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"

namespace tg {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const LlamaHParams& hp, int64_t n_ctx,
                                                         DType type, Device* device) {
  return Create(hp, n_ctx, type, std::vector<Device*>(hp.n_layer, device));
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(
    const LlamaHParams& hp, int64_t n_ctx, DType type, const std::vector<Device*>& layer_devices) {
  if (type != DType::kF16 && type != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache type must be f16 or f32, not ", DTypeName(type)));
  }
  if (n_ctx <= 0) return absl::InvalidArgumentError(absl::StrCat("context size ", n_ctx));
  if (static_cast<int64_t>(layer_devices.size()) != hp.n_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache: ", layer_devices.size(), " devices for ", hp.n_layer, " layers"));
  }
  std::unique_ptr<KvCache> c(new KvCache());
  c->n_ctx_ = n_ctx;
  c->type_ = type;
  // Per device (in first-use order): its layers' tensors and their offsets in one buffer.
  std::vector<Device*> devices;
  std::vector<std::vector<std::pair<Tensor*, size_t>>> placement;
  std::vector<size_t> totals;
  for (int64_t i = 0; i < hp.n_layer; ++i) {
    Device* device = layer_devices[i];
    if (device == nullptr) return absl::InvalidArgumentError("KV cache: null device");
    size_t d = std::find(devices.begin(), devices.end(), device) - devices.begin();
    if (d == devices.size()) {
      devices.push_back(device);
      placement.emplace_back();
      totals.push_back(0);
    }
    const size_t align = device->default_buffer_type()->alignment();
    for (const char* which : {"k", "v"}) {
      TG_ASSIGN_OR_RETURN(Tensor * t, c->ctx_.NewTensor(type, {hp.n_embd_kv(), n_ctx}));
      t->SetName(absl::StrCat("cache_", which, "_l", i));
      (which[0] == 'k' ? c->k_ : c->v_).push_back(t);
      totals[d] = (totals[d] + align - 1) / align * align;
      placement[d].emplace_back(t, totals[d]);
      totals[d] += device->default_buffer_type()->AllocSize(*t);
    }
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    absl::StatusOr<std::unique_ptr<Buffer>> buffer =
        devices[d]->default_buffer_type()->Allocate(totals[d]);
    if (!buffer.ok()) {
      return KeepIdentity(
          buffer.status(),
          absl::ResourceExhaustedError(absl::StrFormat(
              "KV cache of %.1f MiB for %d positions does not fit on %s: %s", totals[d] / 1048576.0,
              n_ctx, devices[d]->name(), buffer.status().message())));
    }
    for (auto& [t, offset] : placement[d])
      TG_RETURN_IF_ERROR(PlaceTensor(buffer->get(), t, offset));
    // Zeros, not garbage: masked cells still take part in dot products before the mask.
    TG_RETURN_IF_ERROR((*buffer)->Clear(0));
    c->buffers_.push_back(std::move(*buffer));
  }
  return c;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const auto& b : buffers_) total += b->size();
  return total;
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::ForModel(const LlamaModel& model,
                                                           int64_t n_ctx, DType type) {
  if (!model.multi_device()) return Create(model.hparams(), n_ctx, type, model.device());
  std::vector<Device*> layer_devices;
  for (int64_t il = 0; il < model.hparams().n_layer; ++il) {
    layer_devices.push_back(model.placement().layer(il));
  }
  return Create(model.hparams(), n_ctx, type, layer_devices);
}

}  // namespace tg
