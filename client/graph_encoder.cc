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
  // desc == nullptr: only the key is computed (the steady state: the server has the graph).
  Encoder(const Graph& graph, const LocateFn& locate, pb::GraphDesc* desc)
      : locate_(locate), desc_(desc) {
    nodes_.reserve(graph.nodes.size());
    for (const Tensor* n : graph.nodes) nodes_.insert(n);
    ids_.reserve(graph.nodes.size() + graph.leafs.size());
  }

  // Assigns t (and, first, everything it reads) an id. Iterative: graphs can be deep.
  absl::StatusOr<uint32_t> Visit(const Tensor* root) {
    if (auto it = ids_.find(root); it != ids_.end()) return it->second;
    stack_.clear();
    stack_.push_back(root);
    while (!stack_.empty()) {
      const Tensor* t = stack_.back();
      if (ids_.contains(t)) {
        stack_.pop_back();
        continue;
      }
      bool ready = true;
      if (!IsLeaf(t)) {
        for (const Tensor* dep : {t->src[0], t->src[1], t->src[2], t->src[3], t->view_src}) {
          if (dep != nullptr && !ids_.contains(dep)) {
            stack_.push_back(dep);
            ready = false;
          }
        }
      }
      if (!ready) {
        if (stack_.size() > 4 * (nodes_.size() + ids_.size()) + 64) {
          return absl::InvalidArgumentError("graph has a cycle");
        }
        continue;
      }
      stack_.pop_back();
      TG_RETURN_IF_ERROR(Emit(t));
    }
    return ids_.at(root);
  }

  void AddNode(uint32_t id) {
    Mix(0xA0DEull ^ id);
    if (desc_ != nullptr) desc_->add_nodes(id);
  }
  uint64_t key() const { return hash_; }

 private:
  // Tensors this graph does not compute (weights, inputs, results of an earlier graph) are
  // sent as leafs: plain memory, whatever op made them.
  // Views of those stay views (a strided view is no plain memory block): they join the node
  // list, where they cost nothing.
  bool IsLeaf(const Tensor* t) const {
    return t->op == Op::kNone || (!nodes_.contains(t) && !IsViewOp(t->op));
  }

  void Mix(uint64_t v) {  // a 64-bit multiply-xorshift hash; keys only need to tell graphs apart.
    hash_ = (hash_ ^ v) * 0x9E3779B97F4A7C15ull;
    hash_ ^= hash_ >> 29;
  }

  absl::Status Emit(const Tensor* t) {
    const uint32_t id = next_id_++;
    const bool leaf = IsLeaf(t);
    const uint32_t op = leaf ? 0 : static_cast<uint32_t>(t->op);
    int n_params = 0, n_src = 0;
    if (!leaf) {
      n_params = kMaxOpParams;
      while (n_params > 0 && t->op_params[n_params - 1] == 0) --n_params;
      n_src = kMaxSrc;
      while (n_src > 0 && t->src[n_src - 1] == nullptr) --n_src;
    }
    uint32_t src_ids[kMaxSrc] = {};
    for (int i = 0; i < n_src; ++i) src_ids[i] = t->src[i] == nullptr ? 0 : ids_.at(t->src[i]);
    const bool view = !leaf && t->view_src != nullptr;
    RemoteLocation loc;
    if (!view) {
      if (t->buffer == nullptr || t->data == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("tensor '", t->name, "' has no memory on the remote device"));
      }
      TG_ASSIGN_OR_RETURN(loc, locate_(*t));
    }
    const uint32_t view_id = view ? ids_.at(t->view_src) : 0;

    Mix(static_cast<uint64_t>(t->type) | uint64_t{op} << 8 | uint64_t{t->flags} << 16 |
        uint64_t{static_cast<uint32_t>(n_src)} << 48 |
        uint64_t{static_cast<uint32_t>(n_params)} << 56);
    for (int i = 0; i < kMaxDims; ++i) {
      Mix(static_cast<uint64_t>(t->ne[i]));
      Mix(t->nb[i]);
    }
    for (int i = 0; i < n_params; ++i) Mix(static_cast<uint32_t>(t->op_params[i]));
    for (int i = 0; i < n_src; ++i) Mix(src_ids[i]);
    if (view) {
      Mix(view_id);
      Mix(t->view_offs);
    } else {
      Mix(loc.buffer);
      Mix(loc.offset);
    }
    Mix(std::hash<std::string_view>{}(std::string_view(t->name)));

    if (desc_ != nullptr) {
      pb::TensorDesc* d = desc_->add_tensors();
      d->set_id(id);
      d->set_type(static_cast<uint32_t>(t->type));
      for (int i = 0; i < kMaxDims; ++i) {
        d->add_ne(t->ne[i]);
        d->add_nb(t->nb[i]);
      }
      d->set_op(op);
      d->set_flags(t->flags);
      d->set_name(t->name);
      d->set_op_params(reinterpret_cast<const char*>(t->op_params), n_params * sizeof(int32_t));
      for (int i = 0; i < n_src; ++i) d->add_src(src_ids[i]);
      if (view) {
        d->set_view_src(view_id);
        d->set_view_offs(t->view_offs);
      } else {
        d->set_buffer(loc.buffer);
        d->set_offset(loc.offset);
      }
    }
    ids_[t] = id;
    if (!leaf && !nodes_.contains(t)) AddNode(id);
    return absl::OkStatus();
  }

  const LocateFn& locate_;
  pb::GraphDesc* desc_;
  uint32_t next_id_ = 1;
  uint64_t hash_ = 0x7470677261706831ull;
  std::vector<const Tensor*> stack_;
  absl::flat_hash_map<const Tensor*, uint32_t> ids_;
  absl::flat_hash_set<const Tensor*> nodes_;
};

absl::Status Walk(const Graph& graph, Encoder& encoder) {
  for (const Tensor* leaf : graph.leafs) TG_RETURN_IF_ERROR(encoder.Visit(leaf).status());
  for (const Tensor* node : graph.nodes) {
    TG_ASSIGN_OR_RETURN(uint32_t id, encoder.Visit(node));
    encoder.AddNode(id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> GraphKey(const Graph& graph, const LocateFn& locate) {
  Encoder encoder(graph, locate, nullptr);
  TG_RETURN_IF_ERROR(Walk(graph, encoder));
  return encoder.key();
}

absl::StatusOr<EncodedGraph> EncodeGraph(const Graph& graph, const LocateFn& locate) {
  EncodedGraph out;
  Encoder encoder(graph, locate, &out.desc);
  TG_RETURN_IF_ERROR(Walk(graph, encoder));
  out.key = encoder.key();
  return out;
}

}  // namespace tg::rpc
