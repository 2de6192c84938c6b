#include "backends/cuda/graph_capture.h"

#include <cstring>

namespace tg::cuda {

bool LaunchesWork(const Tensor& node) {
  return !IsViewOp(node.op) && node.op != Op::kNone && node.NumElements() > 0;
}

void GraphSignature::Fill(const Tensor& node, Record* r) {
  // Zeroed first, padding included, so that records compare with memcmp.
  std::memset(r, 0, sizeof(*r));
  r->op = static_cast<int32_t>(node.op);
  std::memcpy(r->params, node.op_params, sizeof(r->params));
  auto fill_view = [](const Tensor& t, View* v) {
    v->data = t.data;
    v->type = static_cast<int32_t>(t.type);
    for (int d = 0; d < kMaxDims; ++d) {
      v->ne[d] = t.ne[d];
      v->nb[d] = t.nb[d];
    }
  };
  fill_view(node, &r->dst);
  for (int s = 0; s < kMaxSrc; ++s) {
    if (node.src[s] != nullptr) fill_view(*node.src[s], &r->src[s]);
  }
}

GraphSignature GraphSignature::Of(const Graph& graph) {
  GraphSignature sig;
  sig.records_.reserve(graph.nodes.size());
  for (const Tensor* node : graph.nodes) {
    if (!LaunchesWork(*node)) continue;
    sig.records_.emplace_back();
    Fill(*node, &sig.records_.back());
  }
  return sig;
}

bool GraphSignature::Matches(const Graph& graph) const {
  size_t i = 0;
  Record r;
  for (const Tensor* node : graph.nodes) {
    if (!LaunchesWork(*node)) continue;
    if (i == records_.size()) return false;
    Fill(*node, &r);
    if (std::memcmp(&r, &records_[i], sizeof(Record)) != 0) return false;
    ++i;
  }
  return i == records_.size();
}

GraphCaptureCache::Decision GraphCaptureCache::Decide(const Graph& graph, bool capturable) {
  ++clock_;
  if (!capturable || !enabled()) {
    // An uncapturable graph object keeps no capture: its memory may be reused by a new one.
    if (auto it = entries_.find(&graph); it != entries_.end()) {
      ++stats_.invalidations;
      entries_.erase(it);
    }
    ++stats_.eager;
    return {};
  }
  auto it = entries_.find(&graph);
  if (it != entries_.end() && !it->second.signature.Matches(graph)) {
    if (it->second.state == State::kCaptured) ++stats_.invalidations;
    entries_.erase(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    if (static_cast<int>(entries_.size()) >= max_graphs_) EvictOne(nullptr);
    Entry e;
    e.signature = GraphSignature::Of(graph);
    e.last_use = clock_;
    entries_.emplace(&graph, std::move(e));
    ++stats_.eager;
    return {};
  }
  Entry& e = it->second;
  e.last_use = clock_;
  switch (e.state) {
    case State::kCaptured:
      ++stats_.replays;
      return {Action::kReplay, e.captured.get()};
    case State::kWarm:
      return {Action::kCapture, nullptr};
    case State::kRefused:
      break;
  }
  ++stats_.eager;
  return {};
}

void GraphCaptureCache::Captured(const Graph& graph, std::unique_ptr<CapturedGraph> captured) {
  auto it = entries_.find(&graph);
  if (it == entries_.end()) return;
  if (captured == nullptr) {
    ++failures_;
    ++stats_.failures;
    it->second.state = State::kRefused;
    return;
  }
  ++stats_.captures;
  it->second.state = State::kCaptured;
  it->second.captured = std::move(captured);
}

void GraphCaptureCache::EvictOne(const Graph* keep) {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->first == keep) continue;
    if (victim == entries_.end() || it->second.last_use < victim->second.last_use) victim = it;
  }
  if (victim == entries_.end()) return;
  if (victim->second.state == State::kCaptured) ++stats_.evictions;
  entries_.erase(victim);
}

void GraphCaptureCache::Clear() { entries_.clear(); }

int GraphCaptureCache::n_captured() const {
  int n = 0;
  for (const auto& [graph, e] : entries_) n += e.state == State::kCaptured ? 1 : 0;
  return n;
}

}  // namespace tg::cuda
