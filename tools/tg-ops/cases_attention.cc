// FLASH_ATTN cases: F16 and F32 K/V (also mixed), GQA, masks (f32/f16, causal, random -inf,
// a fully masked row, padded rows), n_q 1 and > 1, odd n_kv, batches, Dv != D, a permuted q
// and K/V that are views of a larger cache; decode shapes (n_q <= 4, hundreds of keys, heads
// of 8 to 256).
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "tools/tg-ops/case_helpers.h"
#include "core/status_macros.h"

namespace tg::ops_tool {
namespace {

enum class MaskKind { kNone, kRandom, kCausal, kFullyMaskedRow };

struct AttnSpec {
  int64_t d;
  int64_t dv;
  int64_t n_q;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t n_kv;
  int64_t batch = 1;
  DType k_type = DType::kF16;
  DType v_type = DType::kF16;
  MaskKind mask = MaskKind::kNone;
  DType mask_type = DType::kF16;
  int64_t mask_rows = 0;  // > n_q: padded mask (0: n_q rows).
  bool views = false;     // q permuted from [D, H, n_q], K/V views of a longer cache.
};

std::string NoteOf(const AttnSpec& s) {
  std::string note = absl::StrCat("n_q=", s.n_q, ", n_kv=", s.n_kv);
  if (s.n_head != s.n_head_kv) absl::StrAppend(&note, ", gqa ", s.n_head, "/", s.n_head_kv);
  const char* masks[] = {"", ", random -inf mask", ", causal mask", ", fully masked row"};
  absl::StrAppend(&note, masks[static_cast<int>(s.mask)]);
  if (s.mask_rows > s.n_q) absl::StrAppend(&note, ", padded mask");
  if (s.views) absl::StrAppend(&note, ", q permuted, k/v cache views");
  return note;
}

TensorOr MakeMask(CaseBuilder& b, const AttnSpec& s) {
  constexpr double kSomeInf = 0.2;
  const Shape4 ne = {s.n_kv, s.mask_rows > s.n_q ? s.mask_rows : s.n_q, 1, 1};
  switch (s.mask) {
    case MaskKind::kRandom:
      return b.Mask(s.mask_type, ne, kSomeInf);
    case MaskKind::kCausal:
      return b.CausalMask(s.mask_type, ne, s.n_q);
    case MaskKind::kFullyMaskedRow:
      return b.Mask(s.mask_type, ne, kSomeInf, s.n_q / 2);
    case MaskKind::kNone:
      break;
  }
  return static_cast<Tensor*>(nullptr);
}

TensorOr MakeQuery(CaseBuilder& b, const AttnSpec& s) {
  if (!s.views) return b.Uniform(DType::kF32, {s.d, s.n_q, s.n_head, s.batch});
  TG_ASSIGN_OR_RETURN(Tensor * q, b.Uniform(DType::kF32, {s.d, s.n_head, s.n_q, s.batch}));
  return Permute(b.ctx(), q, 0, 2, 1, 3);
}

// K or V [dim, n_kv, H_kv, B], as a view of the first n_kv rows of a longer cache if asked.
TensorOr MakeKv(CaseBuilder& b, const AttnSpec& s, DType type, int64_t dim) {
  constexpr int64_t kCacheSlack = 61;  // cache rows beyond n_kv that must not be read.
  if (!s.views) return b.Uniform(type, {dim, s.n_kv, s.n_head_kv, s.batch});
  TG_ASSIGN_OR_RETURN(Tensor * cache,
                          b.Uniform(type, {dim, s.n_kv + kCacheSlack, s.n_head_kv, s.batch}));
  return View(b.ctx(), cache, {dim, s.n_kv, s.n_head_kv, s.batch},
              {cache->nb[1], cache->nb[2], cache->nb[3]}, 0);
}

OpCase AttnCase(const AttnSpec& s) {
  const bool all_f32 = s.k_type == DType::kF32 && s.v_type == DType::kF32;
  return {Op::kFlashAttn, NoteOf(s), all_f32 ? kNmseF32 : kNmseF16Attention,
          [s](CaseBuilder& b) -> TensorOr {
            TG_ASSIGN_OR_RETURN(Tensor * q, MakeQuery(b, s));
            TG_ASSIGN_OR_RETURN(Tensor * k, MakeKv(b, s, s.k_type, s.d));
            TG_ASSIGN_OR_RETURN(Tensor * v, MakeKv(b, s, s.v_type, s.dv));
            TG_ASSIGN_OR_RETURN(Tensor * mask, MakeMask(b, s));
            const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
            return FlashAttn(b.ctx(), q, k, v, mask, scale);
          }};
}

}  // namespace

void AddAttentionCases(std::vector<OpCase>* cases) {
  constexpr DType kF32 = DType::kF32;
  constexpr DType kF16 = DType::kF16;
  const AttnSpec specs[] = {
      {.d = 64,
       .dv = 64,
       .n_q = 1,
       .n_head = 4,
       .n_head_kv = 4,
       .n_kv = 67,
       .mask = MaskKind::kRandom},
      {.d = 64,
       .dv = 64,
       .n_q = 7,
       .n_head = 8,
       .n_head_kv = 2,
       .n_kv = 33,
       .mask = MaskKind::kCausal,
       .mask_type = kF32},
      {.d = 64,
       .dv = 64,
       .n_q = 5,
       .n_head = 4,
       .n_head_kv = 1,
       .n_kv = 32,
       .k_type = kF32,
       .v_type = kF32},
      {.d = 128,
       .dv = 128,
       .n_q = 1,
       .n_head = 2,
       .n_head_kv = 1,
       .n_kv = 257,
       .mask = MaskKind::kCausal},
      {.d = 32,
       .dv = 32,
       .n_q = 3,
       .n_head = 2,
       .n_head_kv = 2,
       .n_kv = 19,
       .batch = 2,
       .k_type = kF32,
       .v_type = kF32,
       .mask = MaskKind::kCausal,
       .mask_type = kF32},
      {.d = 64,
       .dv = 32,
       .n_q = 4,
       .n_head = 4,
       .n_head_kv = 2,
       .n_kv = 45,
       .k_type = kF32,
       .v_type = kF32,
       .mask = MaskKind::kRandom},
      {.d = 32,
       .dv = 32,
       .n_q = 4,
       .n_head = 2,
       .n_head_kv = 1,
       .n_kv = 20,
       .mask = MaskKind::kFullyMaskedRow,
       .mask_type = kF32},
      {.d = 64,
       .dv = 64,
       .n_q = 3,
       .n_head = 4,
       .n_head_kv = 4,
       .n_kv = 25,
       .mask = MaskKind::kCausal,
       .mask_rows = 8},
      {.d = 64,
       .dv = 64,
       .n_q = 6,
       .n_head = 8,
       .n_head_kv = 2,
       .n_kv = 67,
       .mask = MaskKind::kCausal,
       .views = true},
      {.d = 64,
       .dv = 64,
       .n_q = 2,
       .n_head = 4,
       .n_head_kv = 2,
       .n_kv = 40,
       .k_type = kF16,
       .v_type = kF32,
       .mask = MaskKind::kRandom},
      {.d = 64, .dv = 64, .n_q = 1, .n_head = 2, .n_head_kv = 1, .n_kv = 1},
      {.d = 80,
       .dv = 80,
       .n_q = 9,
       .n_head = 4,
       .n_head_kv = 4,
       .n_kv = 9,
       .k_type = kF32,
       .v_type = kF32,
       .mask = MaskKind::kCausal,
       .mask_type = kF32},
      // Decode shapes (n_q <= 4, hundreds of keys, n_kv no power of two), which GPUs run
      // with the Vulkan decode kernel: heads of 8 to 256 (teams of 1 to 8 invocations per key
      // on 8-wide subgroups), GQA, batches, views, a fully masked row among several.
      {.d = 64,
       .dv = 64,
       .n_q = 1,
       .n_head = 8,
       .n_head_kv = 2,
       .n_kv = 300,
       .mask = MaskKind::kRandom,
       .views = true},
      {.d = 128,
       .dv = 128,
       .n_q = 4,
       .n_head = 4,
       .n_head_kv = 2,
       .n_kv = 383,
       .batch = 2,
       .k_type = kF32,
       .v_type = kF32,
       .mask = MaskKind::kCausal,
       .mask_type = kF32},
      {.d = 8,
       .dv = 8,
       .n_q = 1,
       .n_head = 8,
       .n_head_kv = 4,
       .n_kv = 200,
       .batch = 3,
       .mask = MaskKind::kRandom},
      {.d = 96,
       .dv = 96,
       .n_q = 3,
       .n_head = 6,
       .n_head_kv = 2,
       .n_kv = 161,
       .v_type = kF32,
       .mask = MaskKind::kFullyMaskedRow,
       .mask_type = kF32,
       .mask_rows = 8},
      {.d = 16,
       .dv = 16,
       .n_q = 2,
       .n_head = 4,
       .n_head_kv = 1,
       .n_kv = 150,
       .mask = MaskKind::kCausal},
      {.d = 256,
       .dv = 256,
       .n_q = 1,
       .n_head = 2,
       .n_head_kv = 1,
       .n_kv = 130,
       .mask = MaskKind::kRandom},
  };
  for (const AttnSpec& s : specs) cases->push_back(AttnCase(s));
}

}  // namespace tg::ops_tool
