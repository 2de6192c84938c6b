#include "meta/split_state.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"

namespace tg::meta {

SplitState SplitState::Partial() {
  SplitState s;
  s.kind_ = SplitKind::kPartial;
  return s;
}

SplitState SplitState::ExpertPartial(std::vector<AxisRange> experts, const Tensor* ids) {
  SplitState s;
  s.kind_ = SplitKind::kPartial;
  s.n_devices_ = static_cast<int>(experts.size());
  s.ranges_.assign(experts.begin(), experts.end());
  s.routed_by_ = ids;
  return s;
}

SplitState SplitState::Axis(int axis, std::vector<AxisRange> ranges) {
  SplitState s;
  s.kind_ = SplitKind::kAxis;
  s.axis_ = axis;
  s.n_devices_ = static_cast<int>(ranges.size());
  s.ranges_.assign(ranges.begin(), ranges.end());
  return s;
}

SplitState SplitState::Segmented(int axis, std::vector<std::vector<AxisRange>> pieces) {
  bool single = true;
  for (auto& p : pieces) {
    if (p.empty()) p.push_back({0, 0});
    single = single && p.size() == 1;
  }
  std::vector<AxisRange> first;
  if (single) {
    for (const auto& p : pieces) first.push_back(p[0]);
    return Axis(axis, std::move(first));
  }
  SplitState s;
  s.kind_ = SplitKind::kAxis;
  s.axis_ = axis;
  s.n_devices_ = static_cast<int>(pieces.size());
  for (const auto& p : pieces) {
    s.starts_.push_back(static_cast<int32_t>(s.ranges_.size()));
    s.ranges_.insert(s.ranges_.end(), p.begin(), p.end());
  }
  s.starts_.push_back(static_cast<int32_t>(s.ranges_.size()));
  return s;
}

absl::Span<const AxisRange> SplitState::pieces(int d) const {
  if (starts_.empty()) return absl::Span<const AxisRange>(&ranges_[d], 1);
  return absl::Span<const AxisRange>(ranges_.data() + starts_[d], starts_[d + 1] - starts_[d]);
}

int64_t SplitState::Count(int d) const {
  if (!is_axis()) return -1;
  if (starts_.empty()) return ranges_[d].size();
  int64_t n = 0;
  for (const AxisRange& r : pieces(d)) n += r.size();
  return n;
}

SplitState SplitState::Remapped(int axis, int64_t num, int64_t den) const {
  SplitState s = *this;
  s.axis_ = axis;
  for (AxisRange& r : s.ranges_) {
    r.begin = r.begin * num / den;
    r.end = r.end * num / den;
  }
  return s;
}

absl::Status SplitState::Validate(const Tensor& t, int n_devices) const {
  if (!is_axis()) return absl::OkStatus();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("split ", ToString(), " of ", DescribeTensor(t), ": ", why));
  };
  if (axis_ < 0 || axis_ >= kMaxDims) return bad("axis out of range");
  if (n_devices != this->n_devices()) {
    return bad(absl::StrCat("has ", this->n_devices(), " entries for ", n_devices, " devices"));
  }
  std::vector<AxisRange> all(ranges_.begin(), ranges_.end());
  std::sort(all.begin(), all.end(),
            [](const AxisRange& a, const AxisRange& b) { return a.begin < b.begin; });
  int64_t next = 0;
  for (const AxisRange& r : all) {
    if (r.size() == 0) continue;
    if (r.begin != next || r.end < r.begin) {
      return bad(
          absl::StrCat("pieces do not tile [0, ", t.ne[axis_], ") (gap or overlap at ", next, ")"));
    }
    next = r.end;
  }
  if (next != t.ne[axis_]) {
    return bad(absl::StrCat("pieces cover [0, ", next, ") of ", t.ne[axis_]));
  }
  const int64_t block = BlockSize(t.type);
  if (axis_ == 0 && block > 1) {
    for (const AxisRange& r : all) {
      if (r.begin % block != 0 || r.end % block != 0) {
        return bad(absl::StrCat("a ", DTypeName(t.type), " row can only be cut at multiples of ",
                                block, " elements"));
      }
    }
  }
  return absl::OkStatus();
}

bool SplitState::operator==(const SplitState& o) const {
  if (kind_ != o.kind_) return false;
  if (kind_ == SplitKind::kPartial) return routed_by_ == o.routed_by_ && ranges_ == o.ranges_;
  if (kind_ != SplitKind::kAxis) return true;
  return axis_ == o.axis_ && n_devices_ == o.n_devices_ && ranges_ == o.ranges_ &&
         starts_ == o.starts_;
}

std::string SplitState::ToString() const {
  switch (kind_) {
    case SplitKind::kMirrored:
      return "MIRRORED";
    case SplitKind::kPartial:
      if (!by_experts()) return "PARTIAL";
      break;
    case SplitKind::kAxis:
      break;
  }
  std::vector<std::string> per_device;
  for (int d = 0; d < n_devices_; ++d) {
    std::vector<std::string> parts;
    for (const AxisRange& r : pieces(d)) parts.push_back(absl::StrCat(r.begin, ":", r.end));
    per_device.push_back(absl::StrJoin(parts, "+"));
  }
  if (by_experts()) return absl::StrCat("PARTIAL_BY_EXPERTS[", absl::StrJoin(per_device, "|"), "]");
  return absl::StrCat("AXIS_", axis_, "[", absl::StrJoin(per_device, "|"), "]");
}

void ShadowShape(const Tensor& t, const SplitState& state, int d, int64_t ne[kMaxDims]) {
  std::copy(t.ne, t.ne + kMaxDims, ne);
  if (state.is_axis()) ne[state.axis()] = state.Count(d);
}

std::vector<AxisRange> ProportionalRanges(int64_t extent, int64_t unit,
                                          absl::Span<const float> proportions) {
  const size_t n = proportions.size();
  std::vector<AxisRange> ranges(n);
  if (n == 0) return ranges;
  unit = std::max<int64_t>(unit, 1);
  const int64_t units = (extent + unit - 1) / unit;
  double total = 0;
  for (float p : proportions) total += std::max(0.0f, p);
  double cum = 0;
  int64_t begin = 0;
  for (size_t d = 0; d < n; ++d) {
    cum += total > 0 ? std::max(0.0f, proportions[d]) / total : 1.0 / n;
    int64_t end_units = d + 1 == n ? units : static_cast<int64_t>(std::llround(cum * units));
    const int64_t end = std::clamp(end_units * unit, begin, extent);
    ranges[d] = {begin, end};
    begin = end;
  }
  return ranges;
}

}  // namespace tg::meta
