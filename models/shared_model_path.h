// SharedModelPath: where the tests and test harnesses find the model files kept outside the
// repository: $TG_SHARED_DIR/models, else ../shared/models as seen from the build folder ctest
// runs in; DemoModelPath: the one inside it. Reads the environment only; thread-safe while
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

// The real tiny model that ships in the repository (demo/stories260K.gguf): test targets have
// its path compiled in (TG_DEMO_MODEL, set by tests/CMakeLists.txt on tg_testlib); elsewhere
// the shared copy.
inline std::string DemoModelPath() {
#ifdef TG_DEMO_MODEL
  return TG_DEMO_MODEL;
#else
  return SharedModelPath("stories260K.gguf");
#endif
}

}  // namespace tg

#endif  // TENSORGRID_MODELS_SHARED_MODEL_PATH_H_
