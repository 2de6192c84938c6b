#include "core/graph_allocator.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"

namespace tg {
namespace {

size_t AlignUp(size_t n, size_t align) { return (n + align - 1) / align * align; }

// First-fit-by-best-size free list over [0, peak), with coalescing.
class FreeList {
 public:
  explicit FreeList(size_t align) : align_(align) {}

  size_t Alloc(size_t size) {
    size = AlignUp(std::max<size_t>(size, 1), align_);
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->size >= size && (best == blocks_.end() || it->size < best->size)) best = it;
    }
    if (best == blocks_.end()) {
      // Grow at the end, absorbing a free block that touches the end.
      size_t offset = end_;
      if (!blocks_.empty() && blocks_.back().offset + blocks_.back().size == end_) {
        offset = blocks_.back().offset;
        blocks_.pop_back();
      }
      end_ = offset + size;
      peak_ = std::max(peak_, end_);
      return offset;
    }
    const size_t offset = best->offset;
    best->offset += size;
    best->size -= size;
    if (best->size == 0) blocks_.erase(best);
    return offset;
  }

  void Free(size_t offset, size_t size) {
    size = AlignUp(std::max<size_t>(size, 1), align_);
    auto it = std::lower_bound(blocks_.begin(), blocks_.end(), offset,
                               [](const Block& b, size_t o) { return b.offset < o; });
    it = blocks_.insert(it, {offset, size});
    if (auto next = it + 1; next != blocks_.end() && it->offset + it->size == next->offset) {
      it->size += next->size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = it - 1;
      if (prev->offset + prev->size == it->offset) {
        prev->size += it->size;
        blocks_.erase(it);
      }
    }
  }

  size_t peak() const { return peak_; }

 private:
  struct Block {
    size_t offset;
    size_t size;
  };
  size_t align_;
  size_t end_ = 0;
  size_t peak_ = 0;
  std::vector<Block> blocks_;  // sorted by offset.
};

Tensor* Owner(Tensor* t) { return t->view_src != nullptr ? t->view_src : t; }

}  // namespace

bool GraphAllocator::Owns(const Tensor& t) const {
  if (t.view_src != nullptr) return false;  // views take their base's memory.
  if (t.data != nullptr && (buffer_ == nullptr || t.buffer != buffer_.get())) return false;
  return !filter_ || filter_(t);
}

absl::StatusOr<AllocationPlan> GraphAllocator::Plan(const Graph& graph) const {
  // Last node index that reads each tensor's memory (through any view of it).
  absl::flat_hash_map<const Tensor*, size_t> last_use;
  last_use.reserve(graph.nodes.size() + graph.leafs.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Tensor* node = graph.nodes[i];
    last_use[Owner(node)] = i;
    for (Tensor* s : node->src) {
      if (s != nullptr) last_use[Owner(s)] = i;
    }
  }
  FreeList free_list(type_->alignment());
  AllocationPlan plan;
  absl::flat_hash_map<const Tensor*, std::pair<size_t, size_t>> live;  // offset, size
  live.reserve(graph.nodes.size() + graph.leafs.size());
  plan.offsets.reserve(graph.nodes.size() + graph.leafs.size());
  auto alloc = [&](Tensor* t) {
    const size_t size = type_->AllocSize(*t);
    const size_t offset = free_list.Alloc(size);
    live[t] = {offset, size};
    plan.offsets.emplace_back(t, offset);
  };
  // Leafs (inputs) first: the caller writes them all before compute starts.
  for (Tensor* leaf : graph.leafs) {
    if (Owns(*leaf)) alloc(leaf);
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Tensor* node = graph.nodes[i];
    if (Owns(*node)) alloc(node);
    // Free what this node was the last to read (never inputs/outputs: the caller uses them).
    auto release = [&](Tensor* t) {
      auto it = live.find(t);
      if (it == live.end() || t->HasFlag(kFlagOutput) || t->HasFlag(kFlagInput)) return;
      auto lu = last_use.find(t);
      if (lu != last_use.end() && lu->second != i) return;
      free_list.Free(it->second.first, it->second.second);
      live.erase(it);
    };
    for (Tensor* s : node->src) {
      if (s != nullptr) release(Owner(s));
    }
    release(Owner(node));
  }
  plan.peak = free_list.peak();
  return plan;
}

absl::Status GraphAllocator::Allocate(Graph& graph) {
  absl::StatusOr<AllocationPlan> plan = Plan(graph);
  if (!plan.ok()) return plan.status();
  if (plan->peak > type_->max_size()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "graph needs %d bytes in one buffer, %s allows %d", plan->peak, type_->name(),
        type_->max_size()));
  }
  if (buffer_ == nullptr || buffer_->size() < plan->peak) {
    buffer_.reset();  // free first: the old buffer and the new one need not coexist.
    absl::StatusOr<std::unique_ptr<Buffer>> buffer = type_->Allocate(std::max<size_t>(plan->peak, 1));
    if (!buffer.ok()) return buffer.status();
    buffer_ = std::move(*buffer);
    buffer_->set_usage(BufferUsage::kCompute);
  }
  for (auto& [t, offset] : plan->offsets) {
    if (absl::Status s = PlaceTensor(buffer_.get(), t, offset); !s.ok()) return s;
  }
  // Views (and aliasing ops: CPY, SET_ROWS) point into their base, in graph order.
  for (Tensor* t : graph.leafs) {
    if (t->view_src != nullptr) {
      if (absl::Status s = PlaceView(t); !s.ok()) return s;
    }
  }
  for (Tensor* t : graph.nodes) {
    if (t->view_src != nullptr) {
      if (absl::Status s = PlaceView(t); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace tg
