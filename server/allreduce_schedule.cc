#include "server/allreduce_schedule.h"

namespace tg::server {

size_t ChunkBegin(size_t count, int m, int c) {
  return count * static_cast<size_t>(c) / static_cast<size_t>(m);
}

std::vector<ExchangeStep> RingSchedule(int m, int rank, size_t count) {
  std::vector<ExchangeStep> steps;
  const int right = (rank + 1) % m;
  const int left = (rank + m - 1) % m;
  auto chunk = [&](int c, size_t* b, size_t* e) {
    c = ((c % m) + m) % m;
    *b = ChunkBegin(count, m, c);
    *e = ChunkBegin(count, m, c + 1);
  };
  // Reduce-scatter: after step s this rank holds the sum of s + 2 ranks in chunk r - s - 1;
  // at the last step that is chunk r + 1, complete.
  for (int s = 0; s + 1 < m; ++s) {
    ExchangeStep st;
    st.id = static_cast<uint32_t>(s);
    st.send_to = right;
    chunk(rank - s, &st.send_begin, &st.send_end);
    st.recv_from = left;
    chunk(rank - s - 1, &st.recv_begin, &st.recv_end);
    st.add = true;
    st.final_sum = s + 2 == m;
    steps.push_back(st);
  }
  // All-gather: each step passes a finished chunk one rank to the right.
  for (int s = 0; s + 1 < m; ++s) {
    ExchangeStep st;
    st.id = static_cast<uint32_t>(m - 1 + s);
    st.send_to = right;
    chunk(rank + 1 - s, &st.send_begin, &st.send_end);
    st.recv_from = left;
    chunk(rank - s, &st.recv_begin, &st.recv_end);
    st.add = false;
    steps.push_back(st);
  }
  return steps;
}

std::vector<ExchangeStep> ButterflySchedule(int m, int rank, size_t count) {
  std::vector<ExchangeStep> steps;
  int p2 = 1;
  int rounds = 0;
  while (p2 * 2 <= m) {
    p2 *= 2;
    ++rounds;
  }
  const int extra = m - p2;
  // Fold: rank p2 + i hands its vector to rank i.
  if (rank >= p2) {
    ExchangeStep st;
    st.id = 0;
    st.send_to = rank - p2;
    st.send_end = count;
    steps.push_back(st);
  } else if (rank < extra) {
    ExchangeStep st;
    st.id = 0;
    st.recv_from = rank + p2;
    st.recv_end = count;
    steps.push_back(st);
  }
  if (rank < p2) {
    for (int k = 0; k < rounds; ++k) {
      ExchangeStep st;
      st.id = static_cast<uint32_t>(1 + k);
      st.send_to = st.recv_from = rank ^ (1 << k);
      st.send_end = st.recv_end = count;
      steps.push_back(st);
    }
  }
  // Unfold: the folded ranks get the result.
  const uint32_t last = static_cast<uint32_t>(1 + rounds);
  if (rank >= p2) {
    ExchangeStep st;
    st.id = last;
    st.recv_from = rank - p2;
    st.recv_end = count;
    st.add = false;
    steps.push_back(st);
  } else if (rank < extra) {
    ExchangeStep st;
    st.id = last;
    st.send_to = rank + p2;
    st.send_end = count;
    steps.push_back(st);
  }
  return steps;
}

std::vector<ExchangeStep> DirectSchedule(int m, int rank, size_t count) {
  std::vector<ExchangeStep> steps;
  for (int k = 1; k < m; ++k) {
    ExchangeStep st;
    st.send_to = (rank + k) % m;
    st.send_end = count;
    steps.push_back(st);
  }
  // The sum v0 + v1 + ... in rank order: rank 0 starts from its own vector, every other rank
  // from rank 0's, and adds its own after rank - 1's.
  for (int from = 0; from < m; ++from) {
    if (from == rank) continue;
    ExchangeStep st;
    st.recv_from = from;
    st.recv_end = count;
    st.add = from > 0;
    st.add_own = from == rank - 1;
    steps.push_back(st);
  }
  return steps;
}

}  // namespace tg::server
