// Meta devices for tg-ops (see meta_devices.h).
#include "tools/tg-ops/meta_devices.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status_macros.h"
#include "meta/meta_device.h"

namespace tg::ops_tool {
namespace {

// Elements per cut along `axis`: whole quant blocks along dimension 0.
int64_t Unit(const Tensor& t, int axis) { return axis == 0 ? BlockSize(t.type) : 1; }

meta::SplitState CutAlong(const Tensor& t, int axis, const std::vector<float>& p) {
  return meta::SplitState::Axis(axis, meta::ProportionalRanges(t.ne[axis], Unit(t, axis), p));
}

bool Cuttable(const Tensor& t, int axis) { return t.ne[axis] / Unit(t, axis) >= 2; }

meta::SplitState Outer(const Tensor& t, const std::vector<float>& p) {
  for (int axis = kMaxDims - 1; axis >= 0; --axis) {
    if (Cuttable(t, axis)) return CutAlong(t, axis, p);
  }
  return meta::SplitState::Mirrored();
}

meta::SplitState Inner(const Tensor& t, const std::vector<float>& p) {
  return Cuttable(t, 0) ? CutAlong(t, 0, p) : Outer(t, p);
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Device>>> MakeMetaDevices(
    const std::vector<Device*>& devices) {
  if (devices.size() < 2) {
    return absl::InvalidArgumentError("a meta device needs at least two devices");
  }
  std::vector<float> p;
  std::vector<std::string> names;
  for (size_t d = 0; d < devices.size(); ++d) {
    p.push_back(static_cast<float>(devices.size() - d));
    names.emplace_back(devices[d]->name());
  }
  const std::string over = absl::StrJoin(names, ",");
  // META splits each tensor along its outermost cuttable axis, META-K along dimension 0
  // where it can.
  const struct {
    const char* prefix;
    meta::SplitState (*split)(const Tensor&, const std::vector<float>&);
  } kinds[] = {{"META", &Outer}, {"META-K", &Inner}};
  std::vector<std::unique_ptr<Device>> out;
  for (const auto& kind : kinds) {
    meta::MetaOptions options;
    options.name = absl::StrCat(kind.prefix, "(", over, ")");
    TG_ASSIGN_OR_RETURN(
        std::unique_ptr<meta::MetaDevice> device,
        meta::MetaDevice::Create(
            devices, [p, split = kind.split](const Tensor& t) { return split(t, p); }, options));
    out.push_back(std::move(device));
  }
  return out;
}

}  // namespace tg::ops_tool
