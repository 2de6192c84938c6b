// ROPE cases: normal and neox modes, partial rotation (n_dims < head_dim), frequency
// factors, linear scaling, YaRN, a non-contiguous source (a view of a fused QKV) and n3 > 1.
#include <string>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "tools/tg-ops/case_helpers.h"
#include "core/status_macros.h"

namespace tg::ops_tool {
namespace {

// Positions stay below this: large positions only test float rounding of the angle.
constexpr int64_t kMaxPosition = 512;

struct RopeSpec {
  Shape4 ne;  // [head_dim, n_head, n_tok, n3]
  int32_t n_dims;
  int32_t mode = kRopeNormal;
  bool freq_factors = false;
  bool yarn = false;
  float freq_scale = 1.0f;
  bool qkv_view = false;  // a is the K part of a fused [head_dim * n_head * 3, n_tok] tensor.
};

RopeParams ParamsOf(const RopeSpec& s) {
  constexpr int32_t kCtxOrig = 4096;
  constexpr float kYarnFreqScale = 0.25f;
  RopeParams p;
  p.n_dims = s.n_dims;
  p.mode = s.mode;
  p.n_ctx_orig = kCtxOrig;
  p.freq_scale = s.freq_scale;
  if (s.yarn) {
    p.freq_scale = kYarnFreqScale;
    p.ext_factor = 1.0f;
  }
  return p;
}

std::string NoteOf(const RopeSpec& s) {
  std::string note = absl::StrCat(s.mode == kRopeNeox ? "neox" : "normal", ", n_dims=", s.n_dims);
  if (s.freq_factors) absl::StrAppend(&note, ", freq factors");
  if (s.yarn) absl::StrAppend(&note, ", yarn");
  if (s.freq_scale != 1.0f) absl::StrAppend(&note, ", freq_scale=", s.freq_scale);
  if (s.qkv_view) absl::StrAppend(&note, ", view of qkv");
  return note;
}

TensorOr RopeSource(CaseBuilder& b, const RopeSpec& s) {
  if (!s.qkv_view) return b.Uniform(DType::kF32, s.ne);
  const int64_t head_bytes = s.ne[0] * sizeof(float);
  const int64_t fused = s.ne[0] * s.ne[1] * 3;
  TG_ASSIGN_OR_RETURN(Tensor * qkv, b.Uniform(DType::kF32, {fused, s.ne[2]}));
  return View(b.ctx(), qkv, {s.ne[0], s.ne[1], s.ne[2]},
              {static_cast<size_t>(head_bytes), qkv->nb[1]}, head_bytes * s.ne[1]);
}

OpCase RopeCase(const RopeSpec& s) {
  return {Op::kRope, NoteOf(s), kNmseF32, [s](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * a, RopeSource(b, s));
            TG_ASSIGN_OR_RETURN(Tensor * pos, b.Indices({s.ne[2]}, kMaxPosition));
            Tensor* ff = nullptr;
            if (s.freq_factors) {
              // Llama-3 style factors: 1 for high frequencies up to ~8 for low ones.
              TG_ASSIGN_OR_RETURN(ff, b.Uniform(DType::kF32, {s.n_dims / 2}, 1.0f, 8.0f));
            }
            return Rope(b.ctx(), a, pos, ff, ParamsOf(s));
          }};
}

}  // namespace

void AddRopeCases(std::vector<OpCase>* cases) {
  const RopeSpec specs[] = {
      {.ne = {64, 4, 5, 1}, .n_dims = 64},
      {.ne = {64, 4, 5, 1}, .n_dims = 64, .mode = kRopeNeox},
      {.ne = {64, 3, 7, 1}, .n_dims = 32},
      {.ne = {80, 2, 6, 1}, .n_dims = 32, .mode = kRopeNeox},
      {.ne = {64, 4, 5, 1}, .n_dims = 64, .mode = kRopeNeox, .freq_factors = true},
      {.ne = {32, 2, 5, 1}, .n_dims = 16, .freq_factors = true},
      {.ne = {64, 4, 5, 1}, .n_dims = 64, .yarn = true},
      {.ne = {64, 4, 5, 1}, .n_dims = 48, .mode = kRopeNeox, .yarn = true},
      {.ne = {128, 2, 3, 1}, .n_dims = 128, .mode = kRopeNeox, .freq_factors = true, .yarn = true},
      {.ne = {64, 4, 5, 1}, .n_dims = 64, .mode = kRopeNeox, .freq_scale = 0.5f},
      {.ne = {64, 4, 5, 1}, .n_dims = 64, .qkv_view = true},
      {.ne = {64, 4, 5, 1}, .n_dims = 32, .mode = kRopeNeox, .qkv_view = true},
      {.ne = {32, 2, 5, 2}, .n_dims = 32, .mode = kRopeNeox},
      {.ne = {2, 1, 3, 1}, .n_dims = 2},
  };
  for (const RopeSpec& s : specs) cases->push_back(RopeCase(s));
}

}  // namespace tg::ops_tool
