#include "core/load_weights.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"

namespace tg {
namespace {

// Buffers loading at once at most: one thread each (a remote buffer's mostly wait on the
// network); a meta device's weights may sit in hundreds of arena chunks.
constexpr size_t kMaxLoadThreads = 64;

}  // namespace

absl::StatusOr<std::vector<LoadStats>> LoadWeights(const WeightSource& source,
                                                   absl::Span<const TensorLoad> loads) {
  struct Group {
    Buffer* buffer = nullptr;
    std::vector<TensorLoad> loads;
    absl::StatusOr<std::vector<LoadStats>> stats = std::vector<LoadStats>{};
  };
  std::vector<Group> groups;
  absl::flat_hash_map<Buffer*, size_t> index;
  for (const TensorLoad& l : loads) {
    if (l.tensor == nullptr || l.tensor->buffer == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrFormat("loading weights: tensor '%s' is not placed in a buffer",
                          l.tensor == nullptr ? "(null)" : l.tensor->name));
    }
    auto [it, added] = index.try_emplace(l.tensor->buffer, groups.size());
    if (added) {
      groups.emplace_back();
      groups.back().buffer = l.tensor->buffer;
    }
    groups[it->second].loads.push_back(l);
  }
  const auto start = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t g; (g = next.fetch_add(1)) < groups.size();) {
      Group& group = groups[g];
      group.stats = group.buffer->LoadTensors(source, group.loads);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!group.stats.ok()) continue;
      for (LoadStats& s : *group.stats) {
        if (s.seconds == 0) s.seconds = seconds;
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t n_threads = std::min(groups.size(), kMaxLoadThreads);
  for (size_t i = 1; i < n_threads; ++i) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  std::vector<LoadStats> out;
  for (Group& group : groups) {
    if (!group.stats.ok()) return group.stats.status();
    for (LoadStats& s : *group.stats) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tg
