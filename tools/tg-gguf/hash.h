// `tg-gguf hash MODEL`: writes MODEL.tghash, the SHA-256 of every piece of the model's tensor
// data with the file's identity and mtime (proto/model_hashes.h), hashed on all cores. A
// client loading MODEL onto rpc-servers then takes the hashes from it instead of hashing.
#ifndef TENSORGRID_TOOLS_TG_GGUF_HASH_H_
#define TENSORGRID_TOOLS_TG_GGUF_HASH_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace tg::gguf_tool {

// Hashes `path` and writes its sidecar; prints what it did to `out`. Errors name the file.
absl::Status RunHash(const std::string& path, std::FILE* out);

}  // namespace tg::gguf_tool

#endif  // TENSORGRID_TOOLS_TG_GGUF_HASH_H_
