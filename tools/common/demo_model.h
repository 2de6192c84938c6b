// The synthetic demo model tg-run and tg-bench use when no -m is given: a small llama of the
// stories15M shape in Q8_0, generated once into a cache directory and reused.
#ifndef TENSORGRID_TOOLS_COMMON_DEMO_MODEL_H_
#define TENSORGRID_TOOLS_COMMON_DEMO_MODEL_H_

#include <string>

#include "absl/status/statusor.h"

namespace tg {

// Returns the path of the demo model inside `dir`, generating it first if it is not there.
absl::StatusOr<std::string> EnsureDemoModel(const std::string& dir);

}  // namespace tg

#endif  // TENSORGRID_TOOLS_COMMON_DEMO_MODEL_H_
