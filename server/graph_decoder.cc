#include "server/graph_decoder.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/shape_rules.h"
#include "core/status_macros.h"
#include "proto/protocol.h"

namespace tg::server {
namespace {

namespace pb = ::tensorgrid::v1;

absl::Status Bad(uint32_t id, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("graph tensor ", id, ": ", what));
}

// Alignment every element (or quant block) address and stride must keep, so that kernels
// never load a misaligned scalar.
size_t ElementAlignment(DType type) {
  if (IsQuantized(type)) return BlockAlignment(type);  // MXFP4's 17-byte blocks: 1.
  return BlockBytes(type);
}

// Rejects strides that make elements overlap (including zero strides): such a tensor could
// have far more elements than bytes, letting a tiny buffer drive enormous compute.
absl::Status CheckNoSelfOverlap(uint32_t id, const Tensor& t) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] == 0) return absl::OkStatus();
  }
  struct Dim {
    uint64_t stride;
    uint64_t count;
  };
  Dim dims[kMaxDims];
  int n = 0;
  const uint64_t count0 = static_cast<uint64_t>(t.ne[0] / BlockSize(t.type));
  if (count0 > 1) dims[n++] = {t.nb[0], count0};
  for (int i = 1; i < kMaxDims; ++i) {
    if (t.ne[i] > 1) dims[n++] = {t.nb[i], static_cast<uint64_t>(t.ne[i])};
  }
  for (int i = 1; i < n; ++i) {  // insertion sort by stride (at most 4 dims).
    for (int j = i; j > 0 && dims[j].stride < dims[j - 1].stride; --j)
      std::swap(dims[j], dims[j - 1]);
  }
  uint64_t extent = BlockBytes(t.type);
  for (int i = 0; i < n; ++i) {
    if (dims[i].stride < extent) {
      return Bad(id, absl::StrFormat("strides %d,%d,%d,%d make elements overlap", t.nb[0], t.nb[1],
                                     t.nb[2], t.nb[3]));
    }
    uint64_t span;
    if (__builtin_mul_overflow(dims[i].stride, dims[i].count - 1, &span) ||
        __builtin_add_overflow(span, extent, &extent)) {
      return Bad(id, "strides overflow");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAlignment(uint32_t id, const Tensor& t) {
  const size_t align = ElementAlignment(t.type);
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.nb[i] % align != 0) {
      return Bad(id,
                 absl::StrFormat("stride nb[%d] = %d is not a multiple of %d", i, t.nb[i], align));
    }
  }
  return absl::OkStatus();
}

// Where a placed tensor's bytes may lie: [data - base, limit) of its buffer.
struct Placement {
  uint64_t offset = 0;  // of data from the buffer's base.
  uint64_t limit = 0;   // client-visible size of the buffer.
};

class Decoder {
 public:
  Decoder(const pb::GraphDesc& desc, Device* device, const BufferResolver& resolve)
      : desc_(desc), device_(device), resolve_(resolve) {}

  absl::StatusOr<std::unique_ptr<DecodedGraph>> Run();

 private:
  absl::Status DecodeTensor(uint32_t id, const pb::TensorDesc& d);
  absl::Status PlaceOwn(uint32_t id, const pb::TensorDesc& d, Tensor* t, uint64_t bytes);
  absl::Status PlaceAlias(uint32_t id, Tensor* t, uint64_t bytes);
  absl::Status CheckNodes();

  const pb::GraphDesc& desc_;
  Device* device_;
  const BufferResolver& resolve_;
  std::unique_ptr<DecodedGraph> out_;
  std::vector<Placement> placement_;                  // by id - 1.
  absl::flat_hash_map<const Tensor*, size_t> index_;  // tensor -> id - 1.
};

absl::StatusOr<std::unique_ptr<DecodedGraph>> Decoder::Run() {
  TG_RETURN_IF_ERROR(CheckGraphSize(desc_));
  out_ = std::make_unique<DecodedGraph>();
  out_->ctx = std::make_unique<Context>();
  out_->tensors.reserve(desc_.tensors_size());
  placement_.resize(desc_.tensors_size());
  for (int i = 0; i < desc_.tensors_size(); ++i) {
    TG_RETURN_IF_ERROR(DecodeTensor(static_cast<uint32_t>(i + 1), desc_.tensors(i)));
  }
  TG_RETURN_IF_ERROR(CheckNodes());
  std::sort(out_->handles.begin(), out_->handles.end());
  out_->handles.erase(std::unique(out_->handles.begin(), out_->handles.end()), out_->handles.end());
  return std::move(out_);
}

absl::Status Decoder::DecodeTensor(uint32_t id, const pb::TensorDesc& d) {
  if (d.id() != id) {
    return Bad(id, absl::StrFormat("has id %d; ids must be 1..n in order", d.id()));
  }
  if (d.op() >= static_cast<uint32_t>(Op::kCount)) {
    return Bad(id, absl::StrFormat("unknown op %d", d.op()));
  }
  absl::StatusOr<DType> type = DTypeFromId(d.type());
  if (!type.ok()) return Bad(id, absl::StrFormat("unknown type id %d", d.type()));
  if (d.ne_size() != kMaxDims || d.nb_size() != kMaxDims) {
    return Bad(id, absl::StrFormat("needs exactly 4 ne and 4 nb (got %d and %d)", d.ne_size(),
                                   d.nb_size()));
  }
  if (d.op_params().size() > sizeof(Tensor::op_params)) {
    return Bad(id, absl::StrFormat("op_params of %d bytes (at most %d)", d.op_params().size(),
                                   sizeof(Tensor::op_params)));
  }
  if (d.src_size() > kMaxSrc)
    return Bad(id, absl::StrFormat("%d sources (at most 4)", d.src_size()));

  Tensor* t = out_->ctx->NewBlank();
  out_->tensors.push_back(t);
  index_[t] = id - 1;
  t->SetName(d.name());
  t->type = *type;
  t->op = static_cast<Op>(d.op());
  for (int i = 0; i < kMaxDims; ++i) {
    t->ne[i] = d.ne(i);
    t->nb[i] = d.nb(i);
  }
  std::memcpy(t->op_params, d.op_params().data(), d.op_params().size());
  t->flags = d.flags() & (kFlagInput | kFlagOutput | kFlagWeight);
  for (int i = 0; i < d.src_size(); ++i) {
    const uint32_t s = d.src(i);
    if (s == 0) continue;
    if (s >= id) return Bad(id, absl::StrFormat("source %d: cyclic graph or forward reference", s));
    t->src[i] = out_->tensors[s - 1];
  }
  if (d.view_src() != 0) {
    if (d.view_src() >= id) {
      return Bad(id,
                 absl::StrFormat("view_src %d: cyclic graph or forward reference", d.view_src()));
    }
    t->view_src = out_->tensors[d.view_src() - 1];
  }
  t->view_offs = d.view_offs();

  if (absl::Status s = CheckShape(t->type, t->ne); !s.ok()) return Bad(id, s.message());
  // Empty tensors compute nothing, and some shape rules divide by source dims.
  if (std::any_of(t->ne, t->ne + kMaxDims, [](int64_t n) { return n == 0; })) {
    return Bad(id, "has a zero dimension (empty tensors are not accepted)");
  }
  absl::StatusOr<uint64_t> bytes = CheckedNumBytes(*t);
  if (!bytes.ok()) return Bad(id, bytes.status().message());
  TG_RETURN_IF_ERROR(CheckAlignment(id, *t));

  if (t->op == Op::kNone) {
    if (d.src_size() > 0 &&
        std::any_of(d.src().begin(), d.src().end(), [](uint32_t s) { return s != 0; })) {
      return Bad(id, "a leaf (op NONE) cannot have sources");
    }
    if (t->view_src != nullptr || t->view_offs != 0) {
      return Bad(id, "a leaf (op NONE) cannot be a view");
    }
    if (t->nb[0] != BlockBytes(t->type)) {
      return Bad(id, absl::StrFormat("nb[0] = %d, a leaf's elements must be contiguous (%d)",
                                     t->nb[0], BlockBytes(t->type)));
    }
    TG_RETURN_IF_ERROR(CheckNoSelfOverlap(id, *t));
    return PlaceOwn(id, d, t, *bytes);
  }
  if (t->op == Op::kView) TG_RETURN_IF_ERROR(CheckNoSelfOverlap(id, *t));
  if (absl::Status s = ValidateNode(*t); !s.ok()) return Bad(id, s.message());
  if (!device_->SupportsOp(*t)) {
    return Bad(id, absl::StrCat(OpName(t->op), " is not supported by ", device_->name()));
  }
  if (t->view_src != nullptr) return PlaceAlias(id, t, *bytes);
  return PlaceOwn(id, d, t, *bytes);
}

absl::Status Decoder::PlaceOwn(uint32_t id, const pb::TensorDesc& d, Tensor* t, uint64_t bytes) {
  if (d.buffer() == 0) return Bad(id, "needs a buffer handle");
  absl::StatusOr<ResolvedBuffer> rb = resolve_(d.buffer());
  if (!rb.ok())
    return absl::Status(rb.status().code(),
                        absl::StrCat("graph tensor ", id, ": ", rb.status().message()));
  if (rb->buffer == nullptr) return Bad(id, "buffer has no memory");
  Device* owner = rb->buffer->type()->device();
  if (owner != device_) {
    return Bad(id, absl::StrCat("buffer belongs to device ", owner != nullptr ? owner->name() : "?",
                                ", the graph runs on ", device_->name()));
  }
  const uint64_t offset = d.offset();
  if (offset > rb->size || bytes > rb->size - offset) {
    return Bad(id, absl::StrFormat("%d bytes at offset %d lie outside its buffer of %d bytes",
                                   bytes, offset, rb->size));
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(rb->buffer->base()) + offset;
  if (addr % ElementAlignment(t->type) != 0) {
    return Bad(
        id, absl::StrFormat("offset %d is not %d-byte aligned", offset, ElementAlignment(t->type)));
  }
  t->buffer = rb->buffer;
  t->data = static_cast<uint8_t*>(rb->buffer->base()) + offset;
  placement_[id - 1] = {offset, rb->size};
  out_->handles.push_back(d.buffer());
  if (absl::Status s = rb->buffer->InitTensor(t); !s.ok()) return Bad(id, s.message());
  return absl::OkStatus();
}

absl::Status Decoder::PlaceAlias(uint32_t id, Tensor* t, uint64_t bytes) {
  const Tensor* root = t->view_src;
  // view_src is a root (ValidateNode checked it), placed earlier.
  const Placement& p = placement_[index_.at(root)];
  uint64_t offset;
  if (root->data == nullptr || __builtin_add_overflow(p.offset, t->view_offs, &offset) ||
      offset > p.limit || bytes > p.limit - offset) {
    return Bad(id, absl::StrFormat("view of %d bytes at offset %d lies outside its buffer", bytes,
                                   t->view_offs));
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(root->data) + t->view_offs;
  if (addr % ElementAlignment(t->type) != 0) {
    return Bad(id, absl::StrFormat("view offset %d is not %d-byte aligned", t->view_offs,
                                   ElementAlignment(t->type)));
  }
  t->buffer = root->buffer;
  t->data = static_cast<uint8_t*>(root->data) + t->view_offs;
  placement_[id - 1] = {offset, p.limit};
  if (absl::Status s = t->buffer->InitTensor(t); !s.ok()) return Bad(id, s.message());
  return absl::OkStatus();
}

absl::Status Decoder::CheckNodes() {
  const size_t n = out_->tensors.size();
  std::vector<uint8_t> done(n, 0);  // 1 = computed (or a leaf).
  size_t non_leaf = 0;
  for (size_t i = 0; i < n; ++i) {
    if (out_->tensors[i]->op == Op::kNone) {
      done[i] = 1;
      out_->graph.leafs.push_back(out_->tensors[i]);
    } else {
      ++non_leaf;
    }
  }
  if (static_cast<size_t>(desc_.nodes_size()) != non_leaf) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "graph lists %d nodes but has %d non-leaf tensors; each must be listed once",
        desc_.nodes_size(), non_leaf));
  }
  auto index_of = [&](const Tensor* t) { return index_.at(t); };
  out_->graph.nodes.reserve(non_leaf);
  for (int k = 0; k < desc_.nodes_size(); ++k) {
    const uint32_t id = desc_.nodes(k);
    if (id == 0 || id > n) {
      return absl::InvalidArgumentError(absl::StrFormat("node %d: no tensor with id %d", k, id));
    }
    Tensor* t = out_->tensors[id - 1];
    if (t->op == Op::kNone) {
      return absl::InvalidArgumentError(absl::StrFormat("node %d: tensor %d is a leaf", k, id));
    }
    if (done[id - 1]) {
      return absl::InvalidArgumentError(absl::StrFormat("node %d: tensor %d listed twice", k, id));
    }
    for (const Tensor* s : t->src) {
      if (s != nullptr && !done[index_of(s)]) {
        return absl::InvalidArgumentError(
            absl::StrFormat("node %d: tensor %d runs before its source", k, id));
      }
    }
    if (t->view_src != nullptr && !done[index_of(t->view_src)]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("node %d: tensor %d runs before its view source", k, id));
    }
    done[id - 1] = 1;
    out_->graph.nodes.push_back(t);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> CheckedNumBytes(const Tensor& t) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] < 0) return absl::InvalidArgumentError("negative dimension");
    if (t.ne[i] == 0) return 0;
  }
  uint64_t bytes;
  int first = 0;
  if (BlockSize(t.type) == 1) {
    bytes = BlockBytes(t.type);
  } else {
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[0]), static_cast<uint64_t>(t.nb[0]),
                               &bytes)) {
      return absl::InvalidArgumentError("byte size overflows");
    }
    bytes /= static_cast<uint64_t>(BlockSize(t.type));
    first = 1;
  }
  for (int i = first; i < kMaxDims; ++i) {
    uint64_t span;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[i] - 1), static_cast<uint64_t>(t.nb[i]),
                               &span) ||
        __builtin_add_overflow(bytes, span, &bytes)) {
      return absl::InvalidArgumentError("byte size overflows");
    }
  }
  if (bytes > kMaxTensorBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spans %d bytes (at most %d)", bytes, kMaxTensorBytes));
  }
  return bytes;
}

absl::Status CheckGraphSize(uint64_t tensors, uint64_t nodes) {
  if (tensors > rpc::kMaxGraphTensors) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "graph has %d tensors, more than the %d a graph may have", tensors, rpc::kMaxGraphTensors));
  }
  if (nodes > rpc::kMaxGraphNodes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "graph has %d nodes, more than the %d a graph may have", nodes, rpc::kMaxGraphNodes));
  }
  return absl::OkStatus();
}

absl::Status CheckGraphSize(const pb::GraphDesc& desc) {
  return CheckGraphSize(static_cast<uint64_t>(desc.tensors_size()),
                        static_cast<uint64_t>(desc.nodes_size()));
}

uint64_t DecodedGraphBytes(const pb::GraphDesc& desc) {
  // Per tensor: the Tensor in the context's deque, its slot in `tensors` and in the leaf or
  // node list, and the decoder's index entry (a hash map slot, about twice its payload).
  constexpr uint64_t kPerTensor = sizeof(Tensor) + 2 * sizeof(Tensor*) + 4 * sizeof(void*);
  constexpr uint64_t kPerNode = sizeof(Tensor*);
  constexpr uint64_t kFixed = sizeof(DecodedGraph) + sizeof(Context) + 4096;
  return kFixed + kPerTensor * static_cast<uint64_t>(desc.tensors_size()) +
         kPerNode * static_cast<uint64_t>(desc.nodes_size());
}

absl::StatusOr<std::unique_ptr<DecodedGraph>> DecodeGraph(const tensorgrid::v1::GraphDesc& desc,
                                                          Device* device,
                                                          const BufferResolver& resolve) {
  if (device == nullptr) return absl::InvalidArgumentError("no device");
  return Decoder(desc, device, resolve).Run();
}

}  // namespace tg::server
