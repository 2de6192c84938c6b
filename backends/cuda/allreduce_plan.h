// How the CUDA collectives sum one F32 tensor per rank (plain C++, unit-tested without a GPU;
// cuda_collectives.cc runs the choice):
//   one-shot  every rank copies its tensor into its staging buffer, waits for the others'
//             copies, and sums all staging buffers (its peers' read over the bus, or
//             directly on one GPU) into its tensor: one wait, (n-1) x bytes read per rank.
//             The latency-bound choice for the small tensors of a decode step.
//   two-shot  rank r sums chunk r of every staging buffer (reduce-scatter), then every rank
//             gathers the reduced chunks (all-gather): two waits, 2 (n-1)/n x bytes read.
//   NCCL      ncclAllReduce: rings and trees over NVLink/PCIe with its own channels; the
//             bandwidth-bound choice for large tensors (prompt batches), where available.
// Every rank sums the same inputs in the same order, so all ranks end bit-identical. With
// BF16 on the wire (tensors of at least bf16_min_bytes) the staged or exchanged copies are
// BF16: half the bytes; the result is the sum of the BF16-rounded inputs. Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_ALLREDUCE_PLAN_H_
#define TENSORGRID_BACKENDS_CUDA_ALLREDUCE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tg::cuda {

// One-shot up to this many bytes on 2 ranks (divided by n - 1 on more: one-shot reads n - 1
// copies). A decode step's tensors (n_embd floats, 8 to 32 KiB) are far below; around a few
// hundred KiB the second wait of two-shot costs less than one-shot's extra reads (vLLM's
// custom all-reduce switches in the same range on NVLink).
inline constexpr size_t kDefaultOneShotMaxBytes = size_t{256} << 10;
// Peer-to-peer up to this many bytes when NCCL is there; above, NCCL's pipelined rings use the
// links better than two-shot's two passes (a 512-token prompt's 8B-model tensor is 8 MiB).
inline constexpr size_t kDefaultP2pMaxBytes = size_t{8} << 20;
// Elements per staging buffer (per rank): larger tensors are reduced in pieces of this size
// (16 MiB of F32: enough that a piece's two waits are amortized).
inline constexpr size_t kStagingElements = size_t{4} << 20;
// Two-shot chunk bounds fall on this many elements (16-byte vector loads of F32 and BF16).
inline constexpr size_t kChunkElements = 8;

enum class AllReduceAlgorithm { kOneShot, kTwoShot, kNccl };
enum class WireType { kF32, kBF16 };

struct AllReduceTopology {
  int n_ranks = 1;
  bool nccl = false;         // an NCCL communicator is set up (distinct GPUs, library found).
  bool peer_access = false;  // every rank reads every other rank's memory (one GPU, or P2P).
};

struct AllReduceThresholds {
  size_t one_shot_max_bytes = kDefaultOneShotMaxBytes;  // TG_CUDA_AR_ONE_SHOT_MAX
  size_t p2p_max_bytes = kDefaultP2pMaxBytes;           // TG_CUDA_AR_P2P_MAX
  // BF16 on the wire from this size on. Off by default, as the meta backend's option: tensor
  // parallel results then match one device's to float rounding.
  size_t bf16_min_bytes = SIZE_MAX;  // TG_CUDA_AR_BF16_MIN
};

struct AllReduceChoice {
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kOneShot;
  WireType wire = WireType::kF32;
};

const char* AllReduceAlgorithmName(AllReduceAlgorithm a);

// FAILED_PRECONDITION when neither peer access nor NCCL connects the ranks.
absl::Status CheckAllReduceTopology(const AllReduceTopology& topology);

// The algorithm for one tensor of `bytes`.
AllReduceChoice ChooseAllReduce(size_t bytes, const AllReduceTopology& topology,
                                const AllReduceThresholds& thresholds);

// Element range [*begin, *end) of rank r's chunk of `count` elements in two-shot: n chunks
// covering [0, count) in order, bounds multiples of kChunkElements (but the last).
void TwoShotChunk(size_t count, int n_ranks, int rank, size_t* begin, size_t* end);

// The thresholds with TG_CUDA_AR_ONE_SHOT_MAX, TG_CUDA_AR_P2P_MAX and TG_CUDA_AR_BF16_MIN
// (bytes) from `getenv` applied; a bad value keeps the default and adds a line to *notes.
AllReduceThresholds AllReduceThresholdsFromEnv(
    const std::function<const char*(const char*)>& getenv, std::vector<std::string>* notes);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_ALLREDUCE_PLAN_H_
