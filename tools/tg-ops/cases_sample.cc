// SAMPLE cases: a llama.cpp-like chain over a 32000-token vocabulary (with and without the
// repetition penalty), the full sort (top_k 0) with a nucleus cut, min-p, a cold and a hot
// temperature, temperature 0 (ARGMAX after the penalty), -inf logits with an all -inf row,
// rows spaced apart in memory and 3-d logits (positions in row order).
//
// Ids must match exactly (a tolerance of 0). No near-tie can flip a pick: candidates are
// ranked by comparing the same f32 inputs (the penalty is one correctly rounded f32
// operation), and docs/ops.md fixes the weights, sums and the draw in f64, so two
// implementations differ only where the uniform number lands within a few f64 ulps of a
// prefix sum. The cutoffs avoid exact ties of a sum with its threshold (no top_p of 0.5 on
// equal logits).
#include "core/ops.h"
#include "core/status_macros.h"
#include "tools/tg-ops/case_helpers.h"

namespace tg::ops_tool {
namespace {

constexpr double kExactIds = 0.0;
constexpr int64_t kPositions = 1 << 20;  // positions drawn from [0, 2^20).

struct SampleSpec {
  Shape4 ne;
  SampleParams params;
  int64_t window = 0;      // recent tokens (0: none).
  float range = 4.0f;      // logits uniform in [-range, range).
  double inf_share = 0.0;  // > 0: that share of -inf logits and row 1 all -inf.
  bool padded = false;     // rows spaced apart in memory.
  bool ties = false;       // logits rounded to f16 (GET_ROWS of an f16 table): many equal.
  const char* note = "";
};

// Logits with many exact ties (f16 has 2^10 values per octave), so candidates of equal
// logits meet at the top-k, top-p and min-p boundaries and their order (smaller id first)
// decides which stay.
TensorOr TiedLogitsCase(CaseBuilder& b, const SampleSpec& s) {
  TG_ASSIGN_OR_RETURN(Tensor * table, b.Uniform(DType::kF16, s.ne, -s.range, s.range));
  TG_ASSIGN_OR_RETURN(Tensor * rows, b.DistinctIndices({s.ne[1]}, s.ne[1]));
  TG_ASSIGN_OR_RETURN(Tensor * logits, GetRows(b.ctx(), table, rows));
  TG_ASSIGN_OR_RETURN(Tensor * pos, b.Indices({s.ne[1]}, kPositions));
  return Sample(b.ctx(), logits, pos, nullptr, s.params);
}

OpCase SampleCase(const SampleSpec& s) {
  return {Op::kSample, s.note, kExactIds, [s](CaseBuilder& b) -> TensorOr {
            if (s.ties) return TiedLogitsCase(b, s);
            TensorOr logits = s.inf_share > 0 ? b.Mask(DType::kF32, s.ne, s.inf_share, 1)
                              : s.padded ? PaddedRowsLeaf(b, DType::kF32, s.ne, -s.range, s.range)
                                         : b.Uniform(DType::kF32, s.ne, -s.range, s.range);
            if (!logits.ok()) return logits.status();
            TG_ASSIGN_OR_RETURN(Tensor * pos, b.Indices({(*logits)->NumRows()}, kPositions));
            Tensor* recent = nullptr;
            if (s.window > 0) {
              TG_ASSIGN_OR_RETURN(recent, b.Indices({s.window}, s.ne[0]));
            }
            return Sample(b.ctx(), *logits, pos, recent, s.params);
          }};
}

}  // namespace

void AddSampleCases(std::vector<OpCase>* cases) {
  constexpr int64_t kVocab = 32000;
  const SampleSpec specs[] = {
      {.ne = {kVocab, 1, 1, 1}, .params = {.seed = 7}, .note = "llama.cpp defaults"},
      {.ne = {kVocab, 3, 1, 1},
       .params = {.repeat_penalty = 1.3f, .seed = 1234567890123ull},
       .window = 64,
       .note = "penalty 1.3 over 64"},
      {.ne = {1000, 6, 1, 1},
       .params = {.temperature = 1.1f, .top_k = 0, .top_p = 0.87f, .min_p = 0.0f, .seed = 3},
       .note = "top_k 0, top_p 0.87"},
      {.ne = {500, 4, 1, 1},
       .params = {.temperature = 1.5f, .top_k = 0, .top_p = 1.0f, .min_p = 0.2f, .seed = 4},
       .note = "min_p 0.2"},
      {.ne = {400, 3, 1, 1},
       .params = {.temperature = 0.05f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 5},
       .note = "T 0.05"},
      {.ne = {300, 5, 1, 1},
       .params = {.temperature = 3.0f, .top_k = 100, .top_p = 0.97f, .min_p = 0.0f, .seed = 6},
       .range = 1.0f,
       .note = "T 3, top_k 100"},
      {.ne = {257, 5, 1, 1},
       .params = {.temperature = 0.0f, .repeat_penalty = 1.5f},
       .window = 16,
       .note = "T 0: argmax after the penalty"},
      {.ne = {300, 4, 1, 1},
       .params = {.temperature = 0.9f, .top_k = 0, .top_p = 1.0f, .min_p = 0.02f, .seed = 8},
       .inf_share = 0.3,
       .note = "-inf logits, an all -inf row"},
      {.ne = {67, 5, 1, 1},
       .params = {.top_k = 10, .top_p = 0.9f, .seed = 9},
       .padded = true,
       .note = "padded rows"},
      {.ne = {2000, 8, 1, 1},
       .params = {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f, .min_p = 0.3f, .seed = 11},
       .range = 2.0f,
       .ties = true,
       .note = "f16-rounded logits: ties"},
      {.ne = {50, 2, 3, 1},
       .params = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 10},
       .window = 5,
       .note = "3-d logits, penalty 1 (off)"},
  };
  for (const SampleSpec& s : specs) cases->push_back(SampleCase(s));
}

}  // namespace tg::ops_tool
