#include "meta/view_split.h"

#include <algorithm>

#include "core/dtype.h"

namespace tg::meta {
namespace {

// Prefix products: out[i] = prod(ne[0..i-1]).
void PrefixProducts(const int64_t ne[kMaxDims], int64_t out[kMaxDims + 1]) {
  out[0] = 1;
  for (int i = 0; i < kMaxDims; ++i) out[i + 1] = out[i] * ne[i];
}

// Tiling check of per-device [t0, t1) ranges over [0, extent).
bool Tiles(std::vector<AxisRange> ranges, int64_t extent) {
  std::sort(ranges.begin(), ranges.end(),
            [](const AxisRange& a, const AxisRange& b) { return a.begin < b.begin; });
  int64_t next = 0;
  for (const AxisRange& r : ranges) {
    if (r.size() == 0) continue;
    if (r.begin != next) return false;
    next = r.end;
  }
  return next == extent;
}

// A view of a root, in units of whole blocks along dimension 0.
struct UnitLayout {
  int64_t root_ne[kMaxDims];
  size_t root_nb[kMaxDims];
  int64_t pos[kMaxDims];  // the view's first element, per root dimension.
  int64_t view_ne[kMaxDims];
  int root_dim[kMaxDims];  // root dimension each view dimension walks (-1: trivial).
  int64_t step[kMaxDims];  // indices of that root dimension per step.
};

bool Decompose(const Tensor& root, const Tensor& view, UnitLayout* u) {
  const int64_t bs = BlockSize(root.type);
  for (int i = 0; i < kMaxDims; ++i) {
    u->root_ne[i] = i == 0 ? root.ne[0] / bs : root.ne[i];
    u->root_nb[i] = root.nb[i];
    u->view_ne[i] = i == 0 ? view.ne[0] / bs : view.ne[i];
  }
  if (view.view_offs % u->root_nb[0] != 0) return false;
  size_t rem = view.view_offs;
  for (int i = kMaxDims - 1; i >= 0; --i) {
    u->pos[i] = static_cast<int64_t>(rem / u->root_nb[i]);
    rem %= u->root_nb[i];
  }
  for (int j = 0; j < kMaxDims; ++j) {
    u->root_dim[j] = -1;
    if (u->view_ne[j] <= 1) continue;
    for (int i = kMaxDims - 1; i >= 0 && u->root_dim[j] < 0; --i) {
      if (u->root_ne[i] > 1 && view.nb[j] % u->root_nb[i] == 0) {
        u->root_dim[j] = i;
        u->step[j] = static_cast<int64_t>(view.nb[j] / u->root_nb[i]);
      }
    }
    if (u->root_dim[j] < 0) return false;
  }
  // No view dimension may wrap around into the next root dimension.
  for (int i = 0; i < kMaxDims; ++i) {
    int64_t last = u->pos[i];
    for (int j = 0; j < kMaxDims; ++j) {
      if (u->root_dim[j] == i) last += u->step[j] * (u->view_ne[j] - 1);
    }
    if (last >= u->root_ne[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<SplitState> MapReshapeSplit(const int64_t from[kMaxDims], const SplitState& state,
                                          const int64_t to[kMaxDims]) {
  if (!state.is_axis() || state.segmented()) return std::nullopt;
  const int k = state.axis();
  int64_t s[kMaxDims + 1];
  int64_t p[kMaxDims + 1];
  PrefixProducts(from, s);
  PrefixProducts(to, p);
  if (s[k + 1] == 0) return std::nullopt;
  int b = -1;
  for (int j = 0; j < kMaxDims; ++j) {
    if (p[j + 1] == s[k + 1] && p[j] < s[k + 1]) b = j;
  }
  if (b < 0) return std::nullopt;
  for (int d = 0; d < state.n_devices(); ++d) {
    const AxisRange& r = state.range(d);
    if ((s[k] * r.begin) % p[b] != 0 || (s[k] * r.end) % p[b] != 0) return std::nullopt;
  }
  return state.Remapped(b, s[k], p[b]);
}

std::optional<ViewSplit> MapViewSplit(const Tensor& root, const SplitState& root_state,
                                      const Tensor& view) {
  if (!root_state.is_axis() || root_state.segmented()) return std::nullopt;
  UnitLayout u;
  if (!Decompose(root, view, &u)) return std::nullopt;
  const int k = root_state.axis();
  const int64_t bs = BlockSize(root.type);
  int b = -1;
  for (int j = 0; j < kMaxDims; ++j) {
    if (u.root_dim[j] == k && (b < 0 || u.step[j] > u.step[b])) b = j;
  }
  if (b < 0) return std::nullopt;
  int64_t inner = 0;  // how far the other view dims on root dim k reach within one step.
  for (int j = 0; j < kMaxDims; ++j) {
    if (j != b && u.root_dim[j] == k) inner += u.step[j] * (u.view_ne[j] - 1);
  }
  if (inner >= u.step[b]) return std::nullopt;
  const int n = root_state.n_devices();
  const int64_t extent = u.view_ne[b];
  const int64_t unit_k = k == 0 ? bs : 1;
  const int64_t unit_b = b == 0 ? bs : 1;
  std::vector<AxisRange> t(n);
  for (int d = 0; d < n; ++d) {
    const int64_t x = root_state.range(d).begin / unit_k;
    const int64_t y = root_state.range(d).end / unit_k;
    int64_t t0 = x <= u.pos[k] ? 0 : (x - u.pos[k] + u.step[b] - 1) / u.step[b];
    t0 = std::min(t0, extent);
    const int64_t reach = y - 1 - inner - u.pos[k];
    const int64_t t1 = std::clamp(reach < 0 ? 0 : reach / u.step[b] + 1, t0, extent);
    t[d] = {t0, t1};
  }
  if (!Tiles(t, extent)) return std::nullopt;
  ViewSplit out;
  std::vector<AxisRange> ranges(n);
  out.slices.resize(n);
  for (int d = 0; d < n; ++d) {
    ranges[d] = {t[d].begin * unit_b, t[d].end * unit_b};
    ViewSlice& slice = out.slices[d];
    if (t[d].size() == 0) continue;
    int64_t ne_d[kMaxDims];
    size_t nb_d[kMaxDims];  // the device's root shadow strides.
    std::copy(u.root_ne, u.root_ne + kMaxDims, ne_d);
    ne_d[k] = root_state.Count(d) / unit_k;
    nb_d[0] = u.root_nb[0];
    for (int i = 1; i < kMaxDims; ++i) nb_d[i] = nb_d[i - 1] * ne_d[i - 1];
    slice.empty = false;
    std::copy(view.ne, view.ne + kMaxDims, slice.ne);
    slice.ne[b] = t[d].size() * unit_b;
    for (int j = 0; j < kMaxDims; ++j) {
      slice.nb[j] = u.root_dim[j] < 0 ? view.nb[j] : u.step[j] * nb_d[u.root_dim[j]];
    }
    if (slice.nb[0] != view.nb[0]) return std::nullopt;
    for (int i = 0; i < kMaxDims; ++i) {
      const int64_t p = i == k
                            ? u.pos[k] + u.step[b] * t[d].begin - root_state.range(d).begin / unit_k
                            : u.pos[i];
      slice.offset += static_cast<size_t>(p) * nb_d[i];
    }
  }
  out.state = SplitState::Axis(b, std::move(ranges));
  return out;
}

SplitState PermuteSplit(const SplitState& state, const int32_t axes[kMaxDims]) {
  if (!state.is_axis()) return state;
  return state.Remapped(axes[state.axis()], 1, 1);
}

}  // namespace tg::meta
