#include "backends/cuda/cuda_tuning.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tg::cuda {
namespace {

// Upper bound of the token thresholds: more than any batch a graph holds.
constexpr int64_t kMaxTokens = int64_t{1} << 30;

void ReadInt(const std::function<const char*(const char*)>& getenv, const char* name, int64_t lo,
             int64_t hi, int64_t* value, std::vector<std::string>* notes) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return;
  int64_t v = 0;
  if (absl::SimpleAtoi(text, &v) && v >= lo && v <= hi) {
    *value = v;
    return;
  }
  if (notes != nullptr) {
    notes->push_back(absl::StrCat(name, "='", text, "' is not a number from ", lo, " to ", hi,
                                  "; using ", *value));
  }
}

void ReadBool(const std::function<const char*(const char*)>& getenv, const char* name, bool* value,
              std::vector<std::string>* notes) {
  int64_t v = *value ? 1 : 0;
  ReadInt(getenv, name, 0, 1, &v, notes);
  *value = v != 0;
}

}  // namespace

CudaTuning CudaTuningFromEnv(const std::function<const char*(const char*)>& getenv,
                             std::vector<std::string>* notes) {
  CudaTuning t;
  ReadInt(getenv, "TG_CUDA_MMQ_MAX_BATCH", 0, kMaxTokens, &t.mmq_max_batch, notes);
  ReadInt(getenv, "TG_CUDA_GRAPH_MAX_TOKENS", 0, kMaxTokens, &t.graph_max_tokens, notes);
  ReadInt(getenv, "TG_CUDA_FA_MMA_MIN_QUERIES", 1, kMaxTokens, &t.fa_mma_min_queries, notes);
  ReadBool(getenv, "TG_CUDA_GRAPHS", &t.graphs, notes);
  ReadBool(getenv, "TG_CUDA_FUSION", &t.fusion, notes);
  return t;
}

const CudaTuning& CurrentCudaTuning() {
  static const CudaTuning* const tuning = [] {
    std::vector<std::string> notes;
    auto* t =
        new CudaTuning(CudaTuningFromEnv([](const char* n) { return std::getenv(n); }, &notes));
    for (const std::string& n : notes) std::fprintf(stderr, "tensorgrid: %s\n", n.c_str());
    return t;
  }();
  return *tuning;
}

}  // namespace tg::cuda
