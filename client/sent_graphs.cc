#include "client/sent_graphs.h"

#include <algorithm>

namespace tg::rpc {

bool SentGraphs::MarkSent(uint64_t key) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(keys_.begin(), keys_.end(), key);
  const bool known = it != keys_.end();
  if (known) keys_.erase(it);
  keys_.push_back(key);
  if (keys_.size() > kCapacity) keys_.pop_front();
  return known;
}

void SentGraphs::Forget(uint64_t key) {
  absl::MutexLock lock(&mu_);
  keys_.erase(std::remove(keys_.begin(), keys_.end(), key), keys_.end());
}

}  // namespace tg::rpc
