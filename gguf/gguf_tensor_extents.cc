#include "gguf/gguf_tensor_extents.h"

#include <memory>
#include <string>

#include "core/status_macros.h"
#include "gguf/gguf_reader.h"

namespace tg {

GgufTensorExtents TensorExtentsOf(const GgufFile& file) {
  GgufTensorExtents out;
  out.data_start = file.data_offset();
  out.unknown_type_tensors = file.unknown_type_tensors();
  out.tensors.reserve(file.tensors().size());
  for (const GgufTensorInfo& t : file.tensors()) {
    out.tensors.push_back({out.data_start + t.offset, t.nbytes});
  }
  return out;
}

absl::StatusOr<GgufTensorExtents> ReadGgufTensorExtents(int fd, uint64_t size,
                                                        absl::string_view name,
                                                        const GgufLimits& limits) {
  GgufPreadReader reader(fd, size, std::string(name));
  TG_ASSIGN_OR_RETURN(
      std::unique_ptr<GgufFile> file,
      GgufFile::Read(reader, name,
                     {.limits = limits, .keep_metadata = false, .skip_unknown_types = true}));
  return TensorExtentsOf(*file);
}

}  // namespace tg
