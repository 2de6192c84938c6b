#include "tools/common/demo_model.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "models/synth/synth.h"

namespace tg {
namespace {

// stories15M's shape (n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab) in Q8_0: big enough
// to show real work, small enough to generate in seconds.
constexpr synth::SynthDims kDemoDims = {288, 768, 6, 6, 6, 32000};

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::StatusOr<std::string> EnsureDemoModel(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/demo-stories15M-shape-q8_0.gguf");
  if (Exists(path)) return path;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot create ", dir, " for the demo model"));
  }
  synth::SynthOptions opts;
  opts.out = path;
  opts.dims = kDemoDims;
  opts.dims_text = "288,768,6,6,6,32000";
  opts.type = DType::kQ8_0;
  opts.type_name = "q8_0";
  opts.file_type = 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
  std::fprintf(stderr, "generating the synthetic demo model (once) ...\n");
  TG_RETURN_IF_ERROR(synth::RunSynth(opts, stderr));
  return path;
}

}  // namespace tg
