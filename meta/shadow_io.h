// Moving a whole tensor between host bytes and its shadows on the devices: scatter (split or
// copy the bytes out to every device: weights at load time, graph inputs before compute) and
// gather (reassemble slices, sum partials: logits after compute). Goes through each shadow's
// Buffer::Set/GetTensor, so any device kind works. Thread-safe for distinct tensors.
#ifndef TENSORGRID_META_SHADOW_IO_H_
#define TENSORGRID_META_SHADOW_IO_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "meta/shadow_set.h"

namespace tg::meta {

// `bytes`: full.NumBytes() bytes of the whole tensor, contiguous. A PARTIAL tensor gets the
// value on its first device and zeros elsewhere.
absl::Status ScatterToShadows(const Tensor& full, const ShadowSet& set, const uint8_t* bytes);

// Fills `bytes` (full.NumBytes()) with the whole tensor. PARTIAL tensors must be F32.
absl::Status GatherFromShadows(const Tensor& full, const ShadowSet& set, uint8_t* bytes);

// Fills every shadow with `value` (a PARTIAL tensor: its first device; zeros elsewhere).
absl::Status MemsetShadows(const ShadowSet& set, uint8_t value);

}  // namespace tg::meta

#endif  // TENSORGRID_META_SHADOW_IO_H_
