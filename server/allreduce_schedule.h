// The exchanges one server makes in an all-reduce among servers (the AllReduce command):
// which range of its vector it sends to which rank, and which range it receives from which
// rank and adds in or takes, step by step. Pure arithmetic, so that the schedules are tested
// by running every rank in one process against an independent sum.
//   ring       reduce-scatter then all-gather, 2(m-1) steps, each moving 1/m of the vector:
//              every server sends ~2x the vector whatever m (large tensors);
//   butterfly  recursive doubling, log2(m) steps of the whole vector; with m not a power of
//              two the extra ranks fold into a partner first and get the result last (small
//              tensors, where the number of round trips is what counts);
//   direct     every rank sends its whole vector to every other at once and adds up all m
//              in rank order: one step, m - 1 times the vector sent (small tensors on three
//              or more servers, where the butterfly would take two or more round trips).
// Every rank ends with the same bits: in the ring each chunk's sum is made by one rank and
// copied; in the butterfly partners add the same two values (a + b == b + a in IEEE); in
// direct every rank makes the same sum in the same order.
// Thread-safety: plain functions.
#ifndef TENSORGRID_SERVER_ALLREDUCE_SCHEDULE_H_
#define TENSORGRID_SERVER_ALLREDUCE_SCHEDULE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tg::server {

struct ExchangeStep {
  uint32_t id = 0;                      // the same number on the sending and the receiving side.
  int send_to = -1;                     // rank, or -1: nothing sent in this step.
  size_t send_begin = 0, send_end = 0;  // element range of the vector.
  int recv_from = -1;                   // rank, or -1: nothing received.
  size_t recv_begin = 0, recv_end = 0;
  bool add = true;  // received values are added in (else they replace).
  // The received range is final here and goes to the other ranks from here: with values on
  // the wire as BF16, round it as they will see it, so that every rank ends bit-identical.
  bool final_sum = false;
  // After the receive, this rank's own values as they were before the first step are added
  // in over the received range (direct: a rank's vector joins the sum at its rank's turn).
  bool add_own = false;
};

// Element i of chunk c of m: [ChunkBegin(count, m, c), ChunkBegin(count, m, c + 1)).
size_t ChunkBegin(size_t count, int m, int c);

// Rank `rank` of m (m >= 1) summing a vector of `count` elements. Sends come before the
// receive within a step.
std::vector<ExchangeStep> RingSchedule(int m, int rank, size_t count);
std::vector<ExchangeStep> ButterflySchedule(int m, int rank, size_t count);
std::vector<ExchangeStep> DirectSchedule(int m, int rank, size_t count);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_ALLREDUCE_SCHEDULE_H_
