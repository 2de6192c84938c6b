#include "client/graph_encoder.h"

#include <functional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tg::rpc {
namespace {

namespace pb = tensorgrid::v1;

class Encoder {
 public:
  Encoder(const Graph& graph, const LocateFn& locate, pb::GraphDesc* desc)
      : locate_(locate), desc_(desc) {
    for (const Tensor* n : graph.nodes) nodes_.insert(n);
  }

  // Assigns t (and, first, everything it reads) an id. Iterative: graphs can be deep.
  absl::StatusOr<uint32_t> Visit(const Tensor* root) {
    if (auto it = ids_.find(root); it != ids_.end()) return it->second;
    std::vector<const Tensor*> stack = {root};
    while (!stack.empty()) {
      const Tensor* t = stack.back();
      if (ids_.contains(t)) {
        stack.pop_back();
        continue;
      }
      bool ready = true;
      for (const Tensor* dep : Deps(t)) {
        if (!ids_.contains(dep)) {
          stack.push_back(dep);
          ready = false;
        }
      }
      if (!ready) {
        if (stack.size() > 4 * (ids_.size() + 16) + 1000000) {
          return absl::InvalidArgumentError("graph has a cycle");
        }
        continue;
      }
      stack.pop_back();
      TG_RETURN_IF_ERROR(Emit(t));
    }
    return ids_.at(root);
  }

 private:
  // Tensors this graph does not compute (weights, inputs, results of an earlier graph) are
  // sent as leafs: plain memory, whatever op made them.
  // Views of those stay views (a strided view is no plain memory block): they join the node
  // list, where they cost nothing.
  bool IsLeaf(const Tensor* t) const {
    return t->op == Op::kNone || (!nodes_.contains(t) && !IsViewOp(t->op));
  }

  std::vector<const Tensor*> Deps(const Tensor* t) const {
    std::vector<const Tensor*> deps;
    if (IsLeaf(t)) return deps;
    for (const Tensor* s : t->src) {
      if (s != nullptr) deps.push_back(s);
    }
    if (t->view_src != nullptr) deps.push_back(t->view_src);
    return deps;
  }

  absl::Status Emit(const Tensor* t) {
    const uint32_t id = static_cast<uint32_t>(desc_->tensors_size() + 1);
    pb::TensorDesc* d = desc_->add_tensors();
    d->set_id(id);
    d->set_type(static_cast<uint32_t>(t->type));
    for (int i = 0; i < kMaxDims; ++i) {
      d->add_ne(t->ne[i]);
      d->add_nb(t->nb[i]);
    }
    const bool leaf = IsLeaf(t);
    d->set_op(leaf ? 0 : static_cast<uint32_t>(t->op));
    d->set_flags(t->flags);
    d->set_name(t->name);
    if (!leaf) {
      int last = kMaxOpParams;
      while (last > 0 && t->op_params[last - 1] == 0) --last;
      d->set_op_params(reinterpret_cast<const char*>(t->op_params), last * sizeof(int32_t));
      int n_src = kMaxSrc;
      while (n_src > 0 && t->src[n_src - 1] == nullptr) --n_src;
      for (int i = 0; i < n_src; ++i) d->add_src(t->src[i] == nullptr ? 0 : ids_.at(t->src[i]));
    }
    if (!leaf && t->view_src != nullptr) {
      d->set_view_src(ids_.at(t->view_src));
      d->set_view_offs(t->view_offs);
    } else {
      if (t->buffer == nullptr || t->data == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("tensor '", t->name, "' has no memory on the remote device"));
      }
      TG_ASSIGN_OR_RETURN(RemoteLocation loc, locate_(*t));
      d->set_buffer(loc.buffer);
      d->set_offset(loc.offset);
    }
    ids_[t] = id;
    if (!leaf && !nodes_.contains(t)) desc_->add_nodes(id);
    return absl::OkStatus();
  }

  const LocateFn& locate_;
  pb::GraphDesc* desc_;
  absl::flat_hash_map<const Tensor*, uint32_t> ids_;
  absl::flat_hash_set<const Tensor*> nodes_;
};

}  // namespace

absl::StatusOr<EncodedGraph> EncodeGraph(const Graph& graph, const LocateFn& locate) {
  EncodedGraph out;
  Encoder encoder(graph, locate, &out.desc);
  for (const Tensor* leaf : graph.leafs) TG_RETURN_IF_ERROR(encoder.Visit(leaf).status());
  for (const Tensor* node : graph.nodes) {
    TG_ASSIGN_OR_RETURN(uint32_t id, encoder.Visit(node));
    out.desc.add_nodes(id);
  }
  std::string bytes;
  out.desc.SerializeToString(&bytes);
  out.key = std::hash<std::string_view>{}(bytes) ^ (uint64_t{bytes.size()} << 40);
  return out;
}

}  // namespace tg::rpc
