#include "meta/split_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/op.h"
#include "meta/view_split.h"

namespace tg::meta {
namespace {

using States = absl::Span<const SplitState* const>;
using Rule = absl::StatusOr<OpSplit> (*)(const Tensor&, States);

const SplitState& Mirrored() {
  static const SplitState* const kMirrored = new SplitState();
  return *kMirrored;
}

using SrcList = std::initializer_list<std::optional<SplitState>>;

// The result's state and the sources', from source `first` on (the others unset).
OpSplit Make(const SplitState& result, SrcList src = {}, int first = 0) {
  OpSplit o;
  o.result = result;
  int i = first;
  for (const auto& s : src) o.src[i++] = s;
  return o;
}

// Everything whole: always correct, the fallback of every rule.
OpSplit AllMirrored(const Tensor& n) {
  OpSplit o = Make(Mirrored());
  for (int i = 0; i < kMaxSrc; ++i) {
    if (n.src[i] != nullptr) o.src[i] = Mirrored();
  }
  return o;
}

// The result keeps the state of source 0; the others as required.
OpSplit Same(const SplitState& s, SrcList rest = {}) { return Make(s, rest, 1); }

bool BlockAligned(const SplitState& s, DType type) {
  const int64_t bs = BlockSize(type);
  for (int d = 0; d < s.n_devices(); ++d) {
    for (const AxisRange& r : s.pieces(d)) {
      if (r.begin % bs != 0 || r.end % bs != 0) return false;
    }
  }
  return true;
}

// Runs `rule` as if every PARTIAL source were all-reduced first, and asks for exactly that.
absl::StatusOr<OpSplit> WithoutPartial(const Tensor& n, States s, Rule rule) {
  const SplitState* states[kMaxSrc] = {};
  bool reduced[kMaxSrc] = {};
  for (int i = 0; i < kMaxSrc; ++i) {
    states[i] = i < static_cast<int>(s.size()) ? s[i] : &Mirrored();
    if (n.src[i] != nullptr && states[i]->is_partial()) {
      states[i] = &Mirrored();
      reduced[i] = true;
    }
  }
  absl::StatusOr<OpSplit> o = rule(n, States(states, kMaxSrc));
  if (!o.ok()) return o;
  for (int i = 0; i < kMaxSrc; ++i) {
    if (reduced[i] && !o->src[i].has_value()) o->src[i] = Mirrored();
  }
  return o;
}

absl::StatusOr<OpSplit> KeepRule(const Tensor& n, States s) { return Same(*s[0]); }

absl::StatusOr<OpSplit> RmsNormRule(const Tensor& n, States s) {
  if (s[0]->is_axis() && s[0]->axis() == 0) return AllMirrored(n);
  return Same(*s[0]);
}

absl::StatusOr<OpSplit> SoftMaxRule(const Tensor& n, States s) {
  const SplitState& sa = *s[0];
  const Tensor* mask = n.src[1];
  if (sa.is_mirrored() || sa.axis() == 0) return AllMirrored(n);
  const int k = sa.axis();
  // Sinks (one per head, dimension 2) go with their heads; rows cut along 1 or 3 use them all.
  std::optional<SplitState> sinks;
  if (n.src[2] != nullptr) sinks = k == 2 ? sa.Remapped(0, 1, 1) : Mirrored();
  std::optional<SplitState> m;
  if (mask != nullptr) {
    if (k == 1 || mask->ne[k] == n.src[0]->ne[k]) {
      m = sa;
    } else if (mask->ne[k] == 1) {
      m = Mirrored();
    } else {
      return AllMirrored(n);
    }
  }
  return Same(sa, {m, sinks});
}

absl::StatusOr<OpSplit> RopeRule(const Tensor& n, States s) {
  const SplitState& sa = *s[0];
  if (sa.is_mirrored() || sa.axis() == 0) return AllMirrored(n);
  std::optional<SplitState> ff;
  if (n.src[2] != nullptr) ff = Mirrored();
  if (sa.axis() == 2) return Same(sa, {sa.Remapped(0, 1, 1), ff});
  return Same(sa, {Mirrored(), ff});
}

absl::StatusOr<OpSplit> BinaryRule(const Tensor& n, States s) {
  const Tensor& a = *n.src[0];
  const Tensor& b = *n.src[1];
  const SplitState& sa = *s[0];
  const SplitState& sb = *s[1];
  if (sa.is_axis()) {
    const int k = sa.axis();
    if (b.ne[k] == a.ne[k]) return Same(sa, {sa});
    if (b.ne[k] == 1) return Same(sa, {Mirrored()});
    return AllMirrored(n);
  }
  if (sb.is_axis()) {
    const int k = sb.axis();
    if (b.ne[k] == a.ne[k]) return Make(sb, {sb, std::nullopt});
    return Make(Mirrored(), {std::nullopt, Mirrored()});
  }
  return Make(Mirrored());
}

// Two ids tensors that hold the same choices: the same tensor, or views of the same bytes.
bool SameIds(const Tensor* a, const Tensor* b) {
  if (a == b) return true;
  auto root = [](const Tensor* t) {
    while (t->view_src != nullptr) t = t->view_src;
    return t;
  };
  if (a == nullptr || b == nullptr || root(a) != root(b)) return false;
  return a->view_offs == b->view_offs && SameShape(*a, *b) &&
         std::equal(a->nb, a->nb + kMaxDims, b->nb);
}

// Both sources are partial sums routed the same way: each row whole on one device, zero on
// the others, so an op with f(0, 0) = 0 may run on them where they are.
bool SameRouting(const SplitState& a, const SplitState& b) {
  if (!a.by_experts() || !b.by_experts() || a.n_devices() != b.n_devices()) return false;
  for (int d = 0; d < a.n_devices(); ++d) {
    if (!(a.range(d) == b.range(d))) return false;
  }
  return SameIds(a.routed_by(), b.routed_by());
}

// Sums of partial sums stay partial; so do products with a whole factor.
absl::StatusOr<OpSplit> AddMulRule(const Tensor& n, States s) {
  const bool pa = s[0]->is_partial();
  const bool pb = s[1]->is_partial();
  if (n.op == Op::kAdd && pa && pb) return Make(SplitState::Partial());
  if (n.op == Op::kMul && SameRouting(*s[0], *s[1])) return Make(*s[0]);
  if (n.op == Op::kMul && (pa || pb)) {
    if (pa && pb) return Make(SplitState::Partial(), {std::nullopt, Mirrored()});
    if ((pa && s[1]->is_mirrored()) || (pb && s[0]->is_mirrored())) {
      return Make(SplitState::Partial());
    }
  }
  return WithoutPartial(n, s, BinaryRule);
}

absl::StatusOr<OpSplit> SwigluRule(const Tensor& n, States s) {
  if (s[0]->is_axis()) return Same(*s[0], {*s[0]});
  if (s[1]->is_axis()) return Make(*s[1], {*s[1], std::nullopt});
  return Make(Mirrored());
}

absl::StatusOr<OpSplit> MulMatSplitWeight(const Tensor& n, States s) {
  const Tensor& a = *n.src[0];
  const Tensor& b = *n.src[1];
  const SplitState& sa = *s[0];
  const int k = sa.axis();
  if (k == 1) return Same(sa.Remapped(0, 1, 1), {Mirrored()});
  if (k == 0) return Same(SplitState::Partial(), {sa});
  if (a.ne[k] == b.ne[k]) return Same(sa, {sa});
  // Grouped heads (unfused attention): a's head h serves b's heads [h g, (h + 1) g).
  if (k >= 2 && b.ne[k] % a.ne[k] == 0) {
    const SplitState grouped = sa.Remapped(k, b.ne[k] / a.ne[k], 1);
    return Same(grouped, {grouped});
  }
  return AllMirrored(n);
}

absl::StatusOr<OpSplit> MulMatRule(const Tensor& n, States s) {
  const Tensor& a = *n.src[0];
  const Tensor& b = *n.src[1];
  const SplitState& sa = *s[0];
  const SplitState& sb = *s[1];
  if (sa.is_axis()) return MulMatSplitWeight(n, s);
  if (!sb.is_axis()) return Make(Mirrored());
  const int k = sb.axis();
  if (k == 1) return Make(sb);
  if (k == 0) {
    if (BlockAligned(sb, a.type)) return Make(SplitState::Partial(), {sb, std::nullopt});
    return Make(Mirrored(), {std::nullopt, Mirrored()});
  }
  if (a.ne[k] == 1) return Make(sb);
  if (a.ne[k] == b.ne[k]) return Make(sb, {sb, std::nullopt});
  return Make(Mirrored(), {std::nullopt, Mirrored()});
}

// Matrix products are linear in each factor: a partial times a whole stays partial.
absl::StatusOr<OpSplit> MulMatPartialRule(const Tensor& n, States s) {
  const bool pa = s[0]->is_partial();
  const bool pb = s[1]->is_partial();
  if (pa && pb) return Make(SplitState::Partial(), {std::nullopt, Mirrored()});
  if ((pa && s[1]->is_mirrored()) || (pb && s[0]->is_mirrored())) {
    return Make(SplitState::Partial());
  }
  return WithoutPartial(n, s, MulMatRule);
}

// MUL_MAT_ID(experts [K,M,E], b [K,n_used|1,T], ids [n_used,T]) -> [M,n_used,T]: experts cut
// by rows M give a row cut; cut along K (b alike) partial sums; cut by whole experts (expert
// parallelism) partial sums routed by the ids: each device computes only the rows of its
// experts (MUL_MAT_ID's expert range, set per device by the shadow builder) and zeros.
absl::StatusOr<OpSplit> MulMatIdSplitExperts(const Tensor& n, States s) {
  const SplitState& sa = *s[0];
  const SplitState& sb = *s[1];
  if (sa.segmented()) return AllMirrored(n);
  switch (sa.axis()) {
    case 1:
      return Same(sa.Remapped(0, 1, 1), {Mirrored(), Mirrored()});
    case 0:
      return Same(SplitState::Partial(), {sa, Mirrored()});
    case 2: {
      std::vector<AxisRange> experts(sa.n_devices());
      for (int d = 0; d < sa.n_devices(); ++d) experts[d] = sa.range(d);
      SplitState routed = SplitState::ExpertPartial(std::move(experts), n.src[2]);
      std::optional<SplitState> b;
      if (!sb.is_mirrored() && !SameRouting(sb, routed)) b = Mirrored();
      return Same(routed, {b, Mirrored()});
    }
    default:
      return AllMirrored(n);
  }
}

absl::StatusOr<OpSplit> MulMatIdRule(const Tensor& n, States s) {
  const Tensor& a = *n.src[0];
  const SplitState& sa = *s[0];
  const SplitState& sb = *s[1];
  if (sa.is_axis()) return MulMatIdSplitExperts(n, s);
  if (sa.is_partial()) return WithoutPartial(n, s, MulMatIdRule);
  if (sb.is_partial() && !sb.by_experts()) {  // linear in b.
    return Make(SplitState::Partial(), {std::nullopt, std::nullopt, Mirrored()});
  }
  if (!sb.is_axis() || sb.segmented()) return AllMirrored(n);
  if (sb.axis() == 0 && BlockAligned(sb, a.type)) {
    return Make(SplitState::Partial(), {sb, std::nullopt, Mirrored()});
  }
  if (sb.axis() == 2) return Make(sb, {std::nullopt, std::nullopt, sb.Remapped(1, 1, 1)});
  return AllMirrored(n);
}

absl::StatusOr<OpSplit> GetRowsRule(const Tensor& n, States s) {
  const SplitState& sa = *s[0];
  const SplitState& si = *s[1];
  if (sa.is_partial() && si.is_mirrored()) return Make(SplitState::Partial());
  if (sa.is_partial()) return WithoutPartial(n, s, GetRowsRule);
  if (sa.is_axis()) {
    const int k = sa.axis();
    if (k == 0) return Same(sa, {Mirrored()});
    if (k == 1) return AllMirrored(n);
    return Same(sa, {sa.Remapped(k - 1, 1, 1)});
  }
  if (si.is_axis()) {
    const int j = si.axis();
    if (j == 3) return AllMirrored(n);
    const SplitState r = si.Remapped(j + 1, 1, 1);
    if (j == 0) return Make(r);
    return Make(r, {r, std::nullopt});
  }
  return Make(Mirrored());
}

absl::StatusOr<OpSplit> SetRowsRule(const Tensor& n, States s) {
  const SplitState& sd = *s[0];
  const Tensor& rows = *n.src[1];
  const Tensor& idx = *n.src[2];
  auto unsupported = [&](absl::string_view why) {
    return absl::UnimplementedError(absl::StrCat("SET_ROWS into ", DescribeTensor(*n.src[0]),
                                                 " split ", sd.ToString(), ": ", why));
  };
  if (sd.is_partial()) return unsupported("cannot write into partial sums");
  if (sd.is_mirrored()) return Same(sd, {Mirrored(), Mirrored()});
  const int k = sd.axis();
  if (k == 0) return Same(sd, {sd, Mirrored()});
  if (k == 1) return unsupported("rows are picked by index, so dimension 1 cannot be cut");
  const int64_t c = idx.ne[k - 1];  // index broadcast over rows' dimension k.
  if (c == 1) return Same(sd, {sd, Mirrored()});
  if (c == rows.ne[k]) return Same(sd, {sd, sd.Remapped(k - 1, 1, 1)});
  return unsupported("the index broadcasts over the cut dimension");
}

absl::StatusOr<OpSplit> CpyRule(const Tensor& n, States s) {
  const Tensor& a = *n.src[0];
  const Tensor& b = *n.src[1];
  const SplitState& sb = *s[1];
  if (sb.is_partial()) {
    return absl::UnimplementedError(absl::StrCat("CPY into partial sums ", DescribeTensor(b)));
  }
  if (sb.is_mirrored()) return Make(sb, {Mirrored(), std::nullopt});
  if (SameShape(a, b)) return Make(sb, {sb, std::nullopt});
  std::optional<SplitState> mapped = MapReshapeSplit(b.ne, sb, a.ne);
  if (!mapped.has_value()) {
    return absl::UnimplementedError(absl::StrCat("CPY into ", DescribeTensor(b), " split ",
                                                 sb.ToString(), " from another shape"));
  }
  return Make(sb, {*mapped, std::nullopt});
}

bool AllDivisible(const SplitState& s, int64_t g) {
  for (int d = 0; d < s.n_devices(); ++d) {
    for (const AxisRange& r : s.pieces(d)) {
      if (r.begin % g != 0 || r.end % g != 0) return false;
    }
  }
  return true;
}

// Heads stay where they are: q head h needs KV head h / (H / H_kv) on the same device.
absl::StatusOr<OpSplit> FlashAttnRule(const Tensor& n, States s) {
  const Tensor& q = *n.src[0];
  const Tensor& k = *n.src[1];
  const int64_t g = q.ne[2] / k.ne[2];
  std::optional<SplitState> mask;
  if (n.src[3] != nullptr) mask = Mirrored();
  const SplitState* kv_ref = nullptr;
  if (s[1]->is_axis() && s[1]->axis() == 2) kv_ref = s[1];
  if (kv_ref == nullptr && s[2]->is_axis() && s[2]->axis() == 2) kv_ref = s[2];
  if (kv_ref != nullptr) {
    const SplitState sq = kv_ref->Remapped(2, g, 1);
    return Make(sq.Remapped(1, 1, 1), {sq, *kv_ref, *kv_ref, mask});
  }
  const SplitState& sq = *s[0];
  if (sq.is_axis() && sq.axis() == 2 && AllDivisible(sq, g)) {
    const SplitState kv = sq.Remapped(2, 1, g);
    return Make(sq.Remapped(1, 1, 1), {std::nullopt, kv, kv, mask});
  }
  if (sq.is_axis() && sq.axis() == 1) {
    if (mask.has_value()) mask = sq;
    return Make(sq.Remapped(2, 1, 1), {std::nullopt, Mirrored(), Mirrored(), mask});
  }
  for (int i = 0; i < 3; ++i) {
    if (s[i]->is_axis() && s[i]->axis() == 3) return Make(*s[i], {*s[i], *s[i], *s[i], mask});
  }
  return AllMirrored(n);
}

absl::StatusOr<OpSplit> Dispatch(const Tensor& n, States s) {
  switch (n.op) {
    case Op::kMulMat:
      return MulMatPartialRule(n, s);
    case Op::kMulMatId:
      return MulMatIdRule(n, s);
    case Op::kAdd:
    case Op::kMul:
      return AddMulRule(n, s);
    case Op::kScale:
      if (n.ParamF32(1) == 0.0f) return Same(*s[0]);  // linear: partial sums stay partial.
      return WithoutPartial(n, s, KeepRule);
    case Op::kCont:
      return Same(*s[0]);
    case Op::kSilu:
      if (s[0]->by_experts()) return Same(*s[0]);  // silu(0) = 0.
      return WithoutPartial(n, s, KeepRule);
    case Op::kRmsNorm:
      return WithoutPartial(n, s, RmsNormRule);
    case Op::kSoftMax:
      return WithoutPartial(n, s, SoftMaxRule);
    case Op::kRope:
      return WithoutPartial(n, s, RopeRule);
    case Op::kSwiglu:
    case Op::kSwigluOai:  // gpt-oss's clamped SwiGLU splits as SWIGLU does: its (0, y) is 0 too.
      if (SameRouting(*s[0], *s[1])) return Make(*s[0]);  // silu(0) * 0 = 0.
      return WithoutPartial(n, s, SwigluRule);
    case Op::kGetRows:
      return GetRowsRule(n, s);
    case Op::kSetRows:
      return SetRowsRule(n, s);
    case Op::kCpy:
      return CpyRule(n, s);
    case Op::kFlashAttn:
      return WithoutPartial(n, s, FlashAttnRule);
    default:
      return AllMirrored(n);
  }
}

}  // namespace

absl::StatusOr<OpSplit> DeriveOpSplit(const Tensor& node,
                                      absl::Span<const SplitState* const> src_states) {
  const SplitState* states[kMaxSrc];
  for (int i = 0; i < kMaxSrc; ++i) {
    states[i] = i < static_cast<int>(src_states.size()) && src_states[i] != nullptr ? src_states[i]
                                                                                    : &Mirrored();
  }
  absl::StatusOr<OpSplit> o = Dispatch(node, States(states, kMaxSrc));
  if (!o.ok()) return o;
  // Write destinations are never converted: the op writes into them where they are.
  if (const int dest = WriteDestination(node.op); dest >= 0) o->src[dest].reset();
  for (int i = 0; i < kMaxSrc; ++i) {
    if (node.src[i] == nullptr) o->src[i].reset();
  }
  return o;
}

}  // namespace tg::meta
