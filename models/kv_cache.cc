#include "models/kv_cache.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace tg {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const LlamaHParams& hp, int64_t n_ctx,
                                                         DType type, Device* device) {
  if (type != DType::kF16 && type != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache type must be f16 or f32, not ", DTypeName(type)));
  }
  if (n_ctx <= 0) return absl::InvalidArgumentError(absl::StrCat("context size ", n_ctx));
  std::unique_ptr<KvCache> c(new KvCache());
  c->n_ctx_ = n_ctx;
  c->type_ = type;
  BufferType* bt = device->default_buffer_type();
  const size_t align = bt->alignment();
  size_t total = 0;
  std::vector<std::pair<Tensor*, size_t>> placement;
  for (int64_t i = 0; i < hp.n_layer; ++i) {
    for (const char* which : {"k", "v"}) {
      TG_ASSIGN_OR_RETURN(Tensor * t, c->ctx_.NewTensor(type, {hp.n_embd_kv(), n_ctx}));
      t->SetName(absl::StrCat("cache_", which, "_l", i));
      (which[0] == 'k' ? c->k_ : c->v_).push_back(t);
      total = (total + align - 1) / align * align;
      placement.emplace_back(t, total);
      total += bt->AllocSize(*t);
    }
  }
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = bt->Allocate(total);
  if (!buffer.ok()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache of %.1f MiB for %d positions does not fit on %s: %s", total / 1048576.0, n_ctx,
        device->name(), buffer.status().message()));
  }
  c->buffer_ = std::move(*buffer);
  for (auto& [t, offset] : placement) TG_RETURN_IF_ERROR(PlaceTensor(c->buffer_.get(), t, offset));
  // Zeros, not garbage: masked cells still take part in dot products before the mask.
  TG_RETURN_IF_ERROR(c->buffer_->Clear(0));
  return c;
}

}  // namespace tg
