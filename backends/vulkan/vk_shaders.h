// The SPIR-V of every compute shader in shaders/, compiled by glslc at build time and
// embedded by a generated source file (see CMakeLists.txt). No shader compiler at run time.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_SHADERS_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_SHADERS_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

namespace tg::vulkan {

struct ShaderBlob {
  const char* name;  // the file name without ".comp": "binary", "mul_mat_vec".
  const uint32_t* words;
  size_t bytes;
};

absl::Span<const ShaderBlob> EmbeddedShaders();

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_SHADERS_H_
