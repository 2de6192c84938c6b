#include "core/weight_source.h"

#include "absl/strings/str_format.h"

namespace tg {

TensorLoad WholeTensorLoad(Tensor* t, uint64_t file_offset, size_t size) {
  return {t, file_offset, StridedRange{.offset = 0, .row_size = size, .n_rows = 1, .stride = size}};
}

absl::Status CheckTensorLoad(const WeightSource& source, const TensorLoad& load) {
  const char* name = load.tensor == nullptr ? "(null)" : load.tensor->name;
  if (load.tensor == nullptr) return absl::InvalidArgumentError("a weight load names no tensor");
  absl::StatusOr<size_t> span = HostSpan(load.rows);
  if (!span.ok()) {
    return absl::Status(span.status().code(),
                        absl::StrFormat("loading '%s': %s", name, span.status().message()));
  }
  const uint64_t file_size = source.mapping.size();
  if (load.file_offset > file_size || *span > file_size - load.file_offset) {
    return absl::OutOfRangeError(
        absl::StrFormat("loading '%s': file bytes [%d, %d) lie past the end of %s (%d bytes)", name,
                        load.file_offset, load.file_offset + *span, source.path, file_size));
  }
  return absl::OkStatus();
}

}  // namespace tg
