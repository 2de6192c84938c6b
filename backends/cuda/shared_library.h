// Loading an optional NVIDIA library (cuBLAS, NCCL) with dlopen instead of linking it: a binary
// built with CUDA must start where the library is missing and say why it is not used. The
// library, once accepted, stays loaded for the life of the process. Thread-compatible: callers
// load once behind a function-local static.
#ifndef TENSORGRID_BACKENDS_CUDA_SHARED_LIBRARY_H_
#define TENSORGRID_BACKENDS_CUDA_SHARED_LIBRARY_H_

#include <dlfcn.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace tg::cuda {

// Looks `name` up in `lib` into *fn; false with *missing = name when the library lacks it.
template <typename Fn>
bool ResolveSymbol(void* lib, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr) *missing = name;
  return *fn != nullptr;
}

// Opens the first of `candidates` (sonames or paths) that `bind` accepts: bind fills the Api
// from the open library and returns "" or why this candidate cannot serve (a missing entry
// point, too old). NOT_FOUND "`what` not found (...)" listing each candidate's reason
// otherwise.
template <typename Api>
absl::StatusOr<Api> OpenFirstLibrary(absl::string_view what,
                                     const std::vector<std::string>& candidates,
                                     const std::function<std::string(void* lib, Api* api)>& bind) {
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    // RTLD_LOCAL: its symbols stay out of the process's namespace.
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      errors.push_back(err != nullptr ? err : path);
      continue;
    }
    Api api;
    if (std::string refused = bind(lib, &api); !refused.empty()) {
      errors.push_back(absl::StrCat(path, " ", refused));
      dlclose(lib);
      continue;
    }
    return api;
  }
  return absl::NotFoundError(absl::StrCat(what, " not found (", absl::StrJoin(errors, "; "), ")"));
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_SHARED_LIBRARY_H_
