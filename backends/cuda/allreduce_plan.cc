#include "backends/cuda/allreduce_plan.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/enum_names.h"

namespace tg::cuda {

constexpr EnumName<AllReduceAlgorithm> kAlgorithmNames[] = {
    {AllReduceAlgorithm::kOneShot, "one-shot"},
    {AllReduceAlgorithm::kTwoShot, "two-shot"},
    {AllReduceAlgorithm::kNccl, "nccl"},
};

const char* AllReduceAlgorithmName(AllReduceAlgorithm a) { return NameOf(kAlgorithmNames, a); }

absl::Status CheckAllReduceTopology(const AllReduceTopology& topology) {
  if (topology.n_ranks < 1) return absl::InvalidArgumentError("all-reduce over no ranks");
  if (topology.n_ranks == 1 || topology.peer_access || topology.nccl) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the ", topology.n_ranks,
                   " GPUs cannot read each other's memory (no peer access) and NCCL is not "
                   "there: install NCCL (libnccl.so.2) or use GPUs with peer access"));
}

AllReduceChoice ChooseAllReduce(size_t bytes, const AllReduceTopology& topology,
                                const AllReduceThresholds& thresholds) {
  AllReduceChoice c;
  c.wire = bytes >= thresholds.bf16_min_bytes ? WireType::kBF16 : WireType::kF32;
  if (!topology.peer_access) {
    c.algorithm = AllReduceAlgorithm::kNccl;
    return c;
  }
  const size_t peers = static_cast<size_t>(std::max(1, topology.n_ranks - 1));
  if (bytes <= thresholds.one_shot_max_bytes / peers) {
    c.algorithm = AllReduceAlgorithm::kOneShot;
  } else if (topology.nccl && bytes > thresholds.p2p_max_bytes) {
    c.algorithm = AllReduceAlgorithm::kNccl;
  } else {
    c.algorithm = AllReduceAlgorithm::kTwoShot;
  }
  return c;
}

void TwoShotChunk(size_t count, int n_ranks, int rank, size_t* begin, size_t* end) {
  auto bound = [&](int i) {
    const size_t raw = count * static_cast<size_t>(i) / static_cast<size_t>(n_ranks);
    return std::min(count, (raw + kChunkElements - 1) / kChunkElements * kChunkElements);
  };
  *begin = bound(rank);
  *end = rank + 1 == n_ranks ? count : bound(rank + 1);
}

AllReduceThresholds AllReduceThresholdsFromEnv(
    const std::function<const char*(const char*)>& getenv, std::vector<std::string>* notes) {
  AllReduceThresholds t;
  auto read = [&](const char* name, size_t* value) {
    const char* text = getenv(name);
    if (text == nullptr || *text == '\0') return;
    uint64_t v = 0;
    if (absl::SimpleAtoi(text, &v)) {
      *value = static_cast<size_t>(v);
    } else if (notes != nullptr) {
      notes->push_back(absl::StrCat(name, "='", text, "' is not a byte count; using ", *value));
    }
  };
  read("TG_CUDA_AR_ONE_SHOT_MAX", &t.one_shot_max_bytes);
  read("TG_CUDA_AR_P2P_MAX", &t.p2p_max_bytes);
  read("TG_CUDA_AR_BF16_MIN", &t.bf16_min_bytes);
  return t;
}

}  // namespace tg::cuda
