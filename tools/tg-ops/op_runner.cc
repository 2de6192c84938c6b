// Building, referencing and device placement of op cases (see op_runner.h).
#include "tools/tg-ops/op_runner.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "reference/reference_ops.h"

namespace tg::ops_tool {

HostTensor::HostTensor(const Tensor& meta, std::vector<uint8_t> bytes)
    : meta_(meta), bytes_(std::move(bytes)) {
  // Detach from the graph: the sources and the base may die before this copy does.
  std::fill(meta_.src, meta_.src + kMaxSrc, nullptr);
  meta_.view_src = nullptr;
  meta_.view_offs = 0;
  meta_.buffer = nullptr;
  meta_.data = nullptr;
}

Tensor HostTensor::tensor() const {
  Tensor t = meta_;
  t.data = const_cast<uint8_t*>(bytes_.data());
  return t;
}

absl::StatusOr<BuiltCase> BuildCase(const BuildFn& build) {
  BuiltCase built;
  built.ctx = std::make_unique<Context>();
  CaseBuilder builder(*built.ctx);
  TG_ASSIGN_OR_RETURN(built.out, build(builder));
  TG_ASSIGN_OR_RETURN(built.graph, BuildGraph({built.out}));
  built.leafs = builder.leafs();
  // Inputs: the allocator must not recycle their memory (a CPY/SET_ROWS result aliases one).
  for (Leaf& leaf : built.leafs) leaf.tensor->flags |= kFlagInput;
  return built;
}

namespace {

// Gives every non-view tensor of the graph its own zeroed host memory and points views at
// their base: independent of the graph allocator, so an allocator bug cannot hide here.
std::vector<std::vector<uint8_t>> PlaceOnHost(Graph& graph) {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<Tensor*> all = graph.leafs;
  all.insert(all.end(), graph.nodes.begin(), graph.nodes.end());
  for (Tensor* t : all) {
    if (t->view_src != nullptr) continue;
    storage.emplace_back(t->NumBytes());
    t->data = storage.back().data();
  }
  for (Tensor* t : all) {
    if (t->view_src != nullptr) t->data = static_cast<uint8_t*>(t->view_src->data) + t->view_offs;
  }
  return storage;
}

absl::Status CheckLeafData(const BuiltCase& built, const LeafData& data) {
  if (data.size() != built.leafs.size()) {
    return absl::InternalError(
        absl::StrCat("case has ", built.leafs.size(), " leafs but ", data.size(), " data blocks"));
  }
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i].size() != built.leafs[i].tensor->NumBytes()) {
      return absl::InternalError(absl::StrCat("leaf ", i, " data size mismatch"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HostTensor> RunReference(BuiltCase& built, const LeafData& data) {
  TG_RETURN_IF_ERROR(CheckLeafData(built, data));
  std::vector<std::vector<uint8_t>> storage = PlaceOnHost(built.graph);
  for (size_t i = 0; i < data.size(); ++i) {
    std::memcpy(built.leafs[i].tensor->data, data[i].data(), data[i].size());
  }
  for (Tensor* node : built.graph.nodes) {
    if (absl::Status s = ref::Compute(node); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("reference: ", s.message()));
    }
  }
  const Tensor& out = *built.out;
  const auto* bytes = static_cast<const uint8_t*>(out.data);
  return HostTensor(out, std::vector<uint8_t>(bytes, bytes + out.NumBytes()));
}

absl::StatusOr<DeviceGraph> PrepareOnDevice(const BuildFn& build, Device& device,
                                            const LeafData& data) {
  DeviceGraph dg;
  TG_ASSIGN_OR_RETURN(dg.built, BuildCase(build));
  TG_RETURN_IF_ERROR(CheckLeafData(dg.built, data));
  dg.allocator = std::make_unique<GraphAllocator>(device.default_buffer_type());
  TG_RETURN_IF_ERROR(dg.allocator->Allocate(dg.built.graph));
  for (size_t i = 0; i < data.size(); ++i) {
    Tensor* leaf = dg.built.leafs[i].tensor;
    if (leaf->buffer == nullptr) {
      return absl::InternalError(absl::StrCat("leaf ", DescribeTensor(*leaf), " was not placed"));
    }
    TG_RETURN_IF_ERROR(leaf->buffer->SetTensor(leaf, data[i].data(), 0, data[i].size()));
  }
  return dg;
}

absl::StatusOr<HostTensor> ReadBack(const Tensor& t) {
  if (t.buffer == nullptr) {
    return absl::InternalError(absl::StrCat("output ", DescribeTensor(t), " has no buffer"));
  }
  std::vector<uint8_t> bytes(t.NumBytes());
  TG_RETURN_IF_ERROR(t.buffer->GetTensor(&t, bytes.data(), 0, bytes.size()));
  return HostTensor(t, std::move(bytes));
}

const Tensor* FirstUnsupportedNode(const Graph& graph, const Device& device) {
  for (const Tensor* node : graph.nodes) {
    if (!device.SupportsOp(*node)) return node;
  }
  return nullptr;
}

}  // namespace tg::ops_tool
