#include "cli/flag_file.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tg {

absl::StatusOr<std::string> ReadFlagFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace tg
