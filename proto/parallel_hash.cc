#include "proto/parallel_hash.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace tg::rpc {

int HashThreads(int threads) {
  if (threads > 0) return threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

absl::Status ParallelForEach(size_t n, int threads, const std::function<absl::Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  absl::Status first_error;
  auto work = [&] {
    for (size_t i; !failed.load() && (i = next.fetch_add(1)) < n;) {
      absl::Status s = fn(i);
      if (!s.ok()) {
        absl::MutexLock lock(&mu);
        if (first_error.ok()) first_error = std::move(s);
        failed = true;
      }
    }
  };
  const size_t n_threads = std::min<size_t>(n, static_cast<size_t>(HashThreads(threads)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();  // the caller's thread is one of them.
  for (std::thread& t : pool) t.join();
  return first_error;
}

std::vector<Sha256Digest> HashPieces(absl::Span<const uint8_t> bytes,
                                     absl::Span<const FileRange> pieces, int threads) {
  std::vector<Sha256Digest> digests(pieces.size());
  ParallelForEach(pieces.size(), threads, [&](size_t i) {
    digests[i] = Sha256(bytes.data() + pieces[i].offset, pieces[i].size);
    return absl::OkStatus();
  }).IgnoreError();  // fn never fails.
  return digests;
}

}  // namespace tg::rpc
