// SharedModelPath: where the tests and test harnesses find the model files kept outside the
// repository (stories260K.gguf and others): $TG_SHARED_DIR/models, else ../shared/models as
// seen from the build folder ctest runs in. Reads the environment only; thread-safe while
// nothing calls setenv.
#ifndef TENSORGRID_MODELS_SHARED_MODEL_PATH_H_
#define TENSORGRID_MODELS_SHARED_MODEL_PATH_H_

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tg {

// The path of the shared model file `name` (which may not exist).
inline std::string SharedModelPath(absl::string_view name) {
  const char* shared = std::getenv("TG_SHARED_DIR");
  return absl::StrCat(shared != nullptr ? shared : "../shared", "/models/", name);
}

}  // namespace tg

#endif  // TENSORGRID_MODELS_SHARED_MODEL_PATH_H_
