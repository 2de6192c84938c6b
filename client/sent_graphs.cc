#include "client/sent_graphs.h"

#include <algorithm>

namespace tg::rpc {

std::optional<SentGraphs::Graph> SentGraphs::TakeLocked(uint64_t key) {
  auto it = std::find_if(graphs_.begin(), graphs_.end(),
                         [key](const Graph& g) { return g.key == key; });
  if (it == graphs_.end()) return std::nullopt;
  const Graph g = *it;
  tensors_ -= g.tensors;
  graphs_.erase(it);
  return g;
}

bool SentGraphs::Known(uint64_t key) {
  absl::MutexLock lock(&mu_);
  const std::optional<Graph> g = TakeLocked(key);
  if (!g.has_value()) return false;
  graphs_.push_back(*g);
  tensors_ += g->tensors;
  return true;
}

void SentGraphs::Sent(uint64_t key, size_t tensors) {
  absl::MutexLock lock(&mu_);
  TakeLocked(key);
  graphs_.push_back({key, tensors});
  tensors_ += tensors;
  while (graphs_.size() > kMaxGraphs || tensors_ > kMaxTensors) {
    tensors_ -= graphs_.front().tensors;
    graphs_.pop_front();
  }
}

void SentGraphs::Forget(uint64_t key) {
  absl::MutexLock lock(&mu_);
  TakeLocked(key);
}

}  // namespace tg::rpc
