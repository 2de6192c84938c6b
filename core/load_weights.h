// LoadWeights: puts a model's weights in place, whatever devices hold them. Groups the loads
// by their tensor's buffer and runs each buffer's Buffer::LoadTensors (core/backend.h) on a
// thread of its own, so that every device, local or on any number of servers, loads at once.
// Thread-safe (no shared state; buffers are used on disjoint tensors).
#ifndef TENSORGRID_CORE_LOAD_WEIGHTS_H_
#define TENSORGRID_CORE_LOAD_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/weight_source.h"

namespace tg {

// Loads every load (each tensor placed in a buffer) from `source`; returns once all are in
// place, with each buffer's stats (a meta buffer's: its devices') in the order the loads first
// name the buffers. Stats without a time get the time their buffer finished. The first error
// of any buffer is returned after all have stopped.
absl::StatusOr<std::vector<LoadStats>> LoadWeights(const WeightSource& source,
                                                   absl::Span<const TensorLoad> loads);

}  // namespace tg

#endif  // TENSORGRID_CORE_LOAD_WEIGHTS_H_
