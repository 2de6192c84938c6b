#include "meta/placements.h"

namespace tg::meta {

void Placements::Reset(size_t n) {
  // Containers keep their capacity: a replayed decode step allocates little.
  entries_.clear();
  entries_.resize(n);
  used_ = 0;
  ids_.Reset(n);
  converted_.clear();
  pool_used_ = 0;
}

Placement& Placements::Add(const Tensor* t) {
  ids_.Insert(t, static_cast<int32_t>(used_));
  return entries_[used_++];
}

const Placement* Placements::Converted(const Tensor* t, const SplitState& state) const {
  for (const auto& [from, p] : converted_) {
    if (from == t && p->state == state) return p;
  }
  return nullptr;
}

const Placement* Placements::AddConverted(const Tensor* t, Placement p) {
  if (pool_used_ == pool_.size()) pool_.push_back(std::make_unique<Placement>());
  Placement* slot = pool_[pool_used_++].get();
  *slot = std::move(p);
  converted_.emplace_back(t, slot);
  return slot;
}

}  // namespace tg::meta
