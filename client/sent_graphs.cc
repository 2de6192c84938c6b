#include "client/sent_graphs.h"

#include <algorithm>

namespace tg::rpc {

bool SentGraphs::Known(uint64_t key) {
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(graphs_.begin(), graphs_.end(),
                         [key](const Graph& g) { return g.key == key; });
  if (it == graphs_.end()) return false;
  const Graph g = *it;
  graphs_.erase(it);
  graphs_.push_back(g);
  return true;
}

void SentGraphs::Sent(uint64_t key, size_t tensors) {
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(graphs_.begin(), graphs_.end(),
                         [key](const Graph& g) { return g.key == key; });
  if (it != graphs_.end()) {
    tensors_ -= it->tensors;
    graphs_.erase(it);
  }
  graphs_.push_back({key, tensors});
  tensors_ += tensors;
  while (graphs_.size() > kMaxGraphs || tensors_ > kMaxTensors) {
    tensors_ -= graphs_.front().tensors;
    graphs_.pop_front();
  }
}

void SentGraphs::Forget(uint64_t key) {
  absl::MutexLock lock(&mu_);
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (it->key == key) {
      tensors_ -= it->tensors;
      it = graphs_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace tg::rpc
