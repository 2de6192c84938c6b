// Memory of a meta device. A MetaBuffer has no bytes of its own: its base is a reserved,
// never dereferenced address range (is_host() is false), so tensors placed in it get unique
// addresses and the core's range checks still hold. What a tensor really is lives in its
// shadows on the underlying devices:
//   - resident tensors (weights, KV cache: buffers whose usage is not kCompute) get their
//     split state from the device's SplitFn and per-device shadows in per-device arenas when
//     placed (InitTensor); Set/GetTensor scatter and gather;
//   - graph tensors (usage kCompute, placed by a GraphAllocator) get shadows from the
//     stream's partition plan at Compute time, in the stream's per-device compute memory
//     (plan_memory.h: each device holds its own share, laid out by its own liveness); a
//     compute buffer holds nothing on the devices. SetTensor before Compute (inputs) is
//     kept on the host until Compute scatters it; GetTensor after Compute gathers the
//     outputs the stream registered, until that stream computes again.
// Thread-safe: the per-tensor maps are guarded by a mutex (a plain std::mutex: it is taken
// for every tensor a graph allocator places, each decode step); disjoint tensors may be
// accessed from several threads.
#ifndef TENSORGRID_META_META_BUFFER_H_
#define TENSORGRID_META_META_BUFFER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/mutex.h"
#include "meta/plan_memory.h"
#include "meta/shadow_set.h"

namespace tg::meta {

class MetaDevice;

class MetaBufferType : public BufferType {
 public:
  explicit MetaBufferType(MetaDevice* device);
  absl::string_view name() const override { return name_; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  size_t alignment() const override { return alignment_; }  // the largest of the devices'.
  size_t max_size() const override { return max_size_; }    // the smallest of the devices'.
  size_t AllocSize(const Tensor& t) const override;         // the largest of the devices'.
  bool is_host() const override { return false; }
  MetaDevice* meta_device() const { return device_; }

  // Bumped whenever a buffer of this type places a resident tensor: a partition plan that
  // bound resident leafs by address is valid only while this is unchanged.
  uint64_t resident_generation() const { return resident_generation_.load(); }
  void BumpResidentGeneration() { resident_generation_.fetch_add(1); }

 private:
  MetaDevice* device_;
  std::string name_;
  size_t alignment_ = 1;
  size_t max_size_ = SIZE_MAX;
  // Per device, so that devices do not affect each other: tensors of two meta devices may
  // share an address, but nothing compares addresses across buffers (range checks and
  // offsets are per buffer, plans bind tensors of their own device only).
  std::atomic<uintptr_t> next_address_;
  std::atomic<uint64_t> resident_generation_{1};
};

class MetaBuffer : public BasicBuffer {
 public:
  MetaBuffer(MetaBufferType* type, uintptr_t base, size_t size);
  absl::Status InitTensor(Tensor* t) override;
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) override;
  absl::Status Clear(uint8_t value) override;
  // Each whole resident tensor's load becomes its devices' loads (LoadWeights over their
  // buffers, all at once): a copy of the file range for a mirrored tensor, and for a split one
  // each device's slice, a sub-range of the file (a cut along the outermost dimension) or rows
  // of it. Other loads: SetTensorLoads.
  absl::StatusOr<std::vector<LoadStats>> LoadTensors(const WeightSource& source,
                                                     absl::Span<const TensorLoad> loads) override;
  // A resident tensor's shadows: each device's slice or copy, in that device's buffer.
  std::vector<TensorPart> Parts(const Tensor& t) const override;

  // The shadows of a resident tensor, or of a graph tensor registered by the last Compute
  // (while its stream has not computed again).
  std::optional<ShadowSet> Shadows(const Tensor* t) const;
  // Called by the stream after a Compute: forgets the last graph's tensors, then records
  // these (outputs and inputs, for GetTensor). Their shadows live in `memory` and hold
  // while its epoch is `epoch` (the registration keeps the memory alive).
  void ResetGraphTensors();
  void RegisterGraphTensor(const Tensor* t, ShadowSet set, std::shared_ptr<const PlanMemory> memory,
                           uint64_t epoch);
  // Bytes SetTensor wrote to a graph tensor since it was placed; nullopt if none.
  std::optional<std::vector<uint8_t>> TakePending(const Tensor* t);
  bool holds_graph_tensors() const { return usage() == BufferUsage::kCompute; }

 private:
  absl::Status CreateResidentShadows(Tensor* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PlaceInArena(int d, Tensor* shadow) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Full-tensor read-modify-write for a partial-range access to a split tensor.
  absl::Status WriteRange(Tensor* t, const ShadowSet& set, const void* data, size_t offset,
                          size_t size);
  // Whole rows [offset, offset + size) of a 2-D tensor split along dimension 0 (a KV cache by
  // heads), written from `in` or (in nullptr) read into `out`, in place: each device's slice
  // of those rows and nothing else. UNIMPLEMENTED for any other range or state (the caller
  // gathers the whole tensor instead).
  absl::Status RowsInPlace(const Tensor& t, const ShadowSet& set, size_t offset, size_t size,
                           const uint8_t* in, uint8_t* out);
  absl::Status SetPending(const Tensor* t, const void* data, size_t offset, size_t size,
                          std::optional<uint8_t> fill);

  struct Arena {
    std::vector<std::unique_ptr<Buffer>> chunks;
    size_t used = 0;  // bytes used in the last chunk.
  };
  struct GraphTensor {
    ShadowSet set;
    std::shared_ptr<const PlanMemory> memory;
    uint64_t epoch = 0;
    bool valid() const { return memory->epoch() == epoch; }
  };
  // The registered shadows of graph tensor t, if still valid.
  std::optional<ShadowSet> GraphShadows(const Tensor* t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  MetaBufferType* meta_type() const { return static_cast<MetaBufferType*>(type()); }

  MetaDevice* device_;

  mutable Mutex mu_;
  Context shadow_ctx_ ABSL_GUARDED_BY(mu_);  // resident shadows.
  std::vector<Arena> arenas_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const Tensor*, ShadowSet> resident_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const Tensor*, GraphTensor> graph_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const Tensor*, std::vector<uint8_t>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_META_BUFFER_H_
