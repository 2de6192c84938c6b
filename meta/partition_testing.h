// Test helpers for the partitioner's parts (graph_partition.h), used without a meta device:
//   FakeShadowLookup  a ShadowLookup whose homes, resident shadows and input states are what
//                     the test sets (tensors it was not told about are graph tensors);
//   PartitionParts    the parts wired as the partitioner wires them, recording a fresh plan.
//   TwoDevicePartsTest  a gtest fixture with PartitionParts over two CPU devices and a context
//                     for the test's tensors.
// Private plan memory comes from the devices the test gives. Not thread-safe.
#ifndef TENSORGRID_META_PARTITION_TESTING_H_
#define TENSORGRID_META_PARTITION_TESTING_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/backend.h"
#include "core/context.h"
#include "gtest/gtest.h"
#include "meta/partition_plan.h"
#include "meta/placements.h"
#include "meta/plan_emitter.h"
#include "meta/shadow_builder.h"
#include "meta/shadow_lookup.h"
#include "meta/split_converter.h"
#include "meta/state_deriver.h"
#include "tests/lib/test_util.h"

namespace tg::meta {

class FakeShadowLookup : public ShadowLookup {
 public:
  explicit FakeShadowLookup(std::vector<Device*> devices) : devices_(std::move(devices)) {}

  // t is resident with these shadows (each placement bumps the generation, as a device's).
  void SetResident(const Tensor* t, ShadowSet set) {
    homes_[t] = Home::kResident;
    resident_[t] = std::move(set);
    ++generation_;
  }
  void SetHome(const Tensor* t, Home home) { homes_[t] = home; }
  void SetInputState(const Tensor* t, SplitState state) { inputs_[t] = std::move(state); }

  int n_devices() const override { return static_cast<int>(devices_.size()); }
  absl::string_view name() const override { return "FAKE"; }
  Home HomeOf(const Tensor& t) const override {
    auto it = homes_.find(&t);
    return it == homes_.end() ? Home::kGraph : it->second;
  }
  std::optional<ShadowSet> ResidentShadows(const Tensor& t) const override {
    auto it = resident_.find(&t);
    if (it == resident_.end()) return std::nullopt;
    return it->second;
  }
  uint64_t ResidentGeneration() const override { return generation_; }
  absl::StatusOr<SplitState> DecideSplit(const Tensor& t) const override {
    auto it = inputs_.find(&t);
    return it == inputs_.end() ? SplitState::Mirrored() : it->second;
  }
  BufferType* DeviceBufferType(int d) const override { return devices_[d]->default_buffer_type(); }

 private:
  std::vector<Device*> devices_;
  absl::flat_hash_map<const Tensor*, Home> homes_;
  absl::flat_hash_map<const Tensor*, ShadowSet> resident_;
  absl::flat_hash_map<const Tensor*, SplitState> inputs_;
  uint64_t generation_ = 1;
};

// t's shape, for EXPECT_EQ.
inline std::vector<int64_t> ShapeOf(const Tensor* t) {
  return {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
}

// Over n_devices devices that all allocate from `device` (the parts never compute); the
// placements have room for `capacity` tensors.
struct PartitionParts {
  PartitionParts(int n_devices, Device* device, size_t capacity = 64)
      : lookup(std::vector<Device*>(n_devices, device)),
        emitter(&plan, lookup.n_devices()),
        shadows(plan.tape, emitter),
        converter(placements, shadows, emitter),
        deriver(placements, converter, shadows) {
    plan.tape.Begin(/*replay=*/false);
    placements.Reset(capacity);
  }

  // Registers t as placed in `state` with these shadows.
  Placement& Place(const Tensor* t, SplitState state, ShadowList list) {
    Placement& p = placements.Add(t);
    p.state = std::move(state);
    p.shadows = std::move(list);
    return p;
  }

  FakeShadowLookup lookup;
  PartitionPlan plan;
  Placements placements;
  PlanEmitter emitter;
  ShadowBuilder shadows;
  SplitConverter converter;
  StateDeriver deriver;
};

class TwoDevicePartsTest : public ::testing::Test {
 protected:
  TwoDevicePartsTest() : parts_(2, testing::CpuDevice()) {}

  PartitionParts parts_;
  Context ctx_;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_PARTITION_TESTING_H_
