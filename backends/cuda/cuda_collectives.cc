#include "backends/cuda/cuda_collectives.h"

#include <algorithm>
#include <cstdlib>

#include "absl/base/call_once.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/collective_wait.h"
#include "backends/cuda/cuda_buffer.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/kernels.h"
#include "core/status_macros.h"

namespace tg::cuda {
namespace {

// Every rank's part goes on its GPU's legacy default stream (see the header).
const cudaStream_t kLegacy = cudaStreamLegacy;
constexpr double kKiB = 1024.0;

std::string Describe(size_t bytes, int n) {
  return absl::StrFormat("all-reduce of %.1f KiB over %d CUDA devices", bytes / kKiB, n);
}

bool PeerReachable(int a, int b) {
  if (a == b) return true;  // slices of one GPU: one address space.
  int ab = 0, ba = 0;
  const bool ok = cudaDeviceCanAccessPeer(&ab, a, b) == cudaSuccess &&
                  cudaDeviceCanAccessPeer(&ba, b, a) == cudaSuccess && ab && ba;
  cudaGetLastError();
  return ok;
}

char* At(Tensor* t, size_t first) { return static_cast<char*>(t->data) + first * sizeof(float); }

}  // namespace

CudaCollectives::CudaCollectives() {
  std::vector<std::string> notes;
  defaults_.thresholds =
      AllReduceThresholdsFromEnv([](const char* n) { return std::getenv(n); }, &notes);
  std::string note;
  defaults_.timeout_us = CollectiveTimeoutUs(std::getenv("TG_NCCL_TIMEOUT_S"), &note);
  if (!note.empty()) notes.push_back(note);
  for (const std::string& n : notes) CudaNotice(n);
}

absl::StatusOr<std::unique_ptr<Communicator>> CudaCollectives::Init(
    absl::Span<Device* const> devices) {
  TG_ASSIGN_OR_RETURN(std::unique_ptr<CudaCommunicator> c, InitWith(devices, defaults_));
  return std::unique_ptr<Communicator>(std::move(c));
}

absl::StatusOr<std::unique_ptr<CudaCommunicator>> CudaCollectives::InitWith(
    absl::Span<Device* const> devices, const CollectiveOptions& options) {
  const int n = static_cast<int>(devices.size());
  if (n < 1 || n > kMaxAllReduceRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA all-reduce over ", n, " devices (1 to ", kMaxAllReduceRanks, ")"));
  }
  std::unique_ptr<CudaCommunicator> c(new CudaCommunicator());
  c->options_ = options;
  if (c->options_.timeout_us <= 0) c->options_.timeout_us = CollectiveTimeoutUs(nullptr, nullptr);
  absl::flat_hash_set<Device*> seen;
  absl::flat_hash_set<int> ordinals;
  for (Device* d : devices) {
    auto* cd = dynamic_cast<CudaDevice*>(d);
    if (cd == nullptr || !seen.insert(d).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CUDA all-reduce needs distinct CUDA devices, got ", d != nullptr ? d->name() : "null"));
    }
    CudaCommunicator::Rank r;
    r.device = cd;
    r.ordinal = cd->index();
    ordinals.insert(r.ordinal);
    c->ranks_.push_back(r);
  }
  AllReduceTopology& topo = c->topology_;
  topo.n_ranks = n;
  topo.peer_access = true;
  for (const auto& a : c->ranks_) {
    for (const auto& b : c->ranks_)
      topo.peer_access = topo.peer_access && PeerReachable(a.ordinal, b.ordinal);
  }
  for (auto& r : c->ranks_) {
    TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(r.ordinal));
    for (cudaEvent_t* e : {&r.copied, &r.reduced_ready, &r.done, &r.nccl_in, &r.nccl_out}) {
      TG_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
  }
  // NCCL: distinct GPUs only (it refuses two ranks on one GPU), when asked and there.
  const bool nccl_wanted = options.use_nccl && static_cast<int>(ordinals.size()) == n &&
                           (n > 1 || options.force == AllReduceAlgorithm::kNccl);
  if (nccl_wanted) {
    absl::StatusOr<const NcclApi*> api = Nccl();
    if (!api.ok()) {
      static absl::once_flag once;
      absl::call_once(once, [&] {
        CudaNotice(absl::StrCat(api.status().message(),
                                "; all-reduce between GPUs uses the peer-to-peer kernels"));
      });
    } else {
      std::vector<NcclComm> comms(n);
      std::vector<int> devs;
      for (const auto& r : c->ranks_) devs.push_back(r.ordinal);
      const NcclResult res = (*api)->comm_init_all(comms.data(), n, devs.data());
      if (res != kNcclSuccess) {
        CudaNotice(absl::StrCat(NcclError(**api, res, "ncclCommInitAll").message(),
                                "; using the peer-to-peer kernels"));
      } else {
        c->nccl_ = *api;
        topo.nccl = true;
        for (int i = 0; i < n; ++i) {
          c->ranks_[i].comm = comms[i];
          TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(c->ranks_[i].ordinal));
          TG_CUDA_RETURN_IF_ERROR(
              cudaStreamCreateWithFlags(&c->ranks_[i].nccl_stream, cudaStreamNonBlocking));
        }
      }
    }
  }
  TG_RETURN_IF_ERROR(CheckAllReduceTopology(topo));
  if (options.force == AllReduceAlgorithm::kNccl && !topo.nccl) {
    return absl::FailedPreconditionError("NCCL was asked for but cannot be used here");
  }
  return c;
}

CudaCommunicator::~CudaCommunicator() {
  for (Rank& r : ranks_) {
    if (cudaSetDevice(r.ordinal) != cudaSuccess) continue;
    cudaDeviceSynchronize();  // nothing of ours may still run on the memory freed below.
    if (r.comm != nullptr) {
      if (broken_.ok()) {
        nccl_->comm_destroy(r.comm);
      } else {
        nccl_->comm_abort(r.comm);
      }
    }
    if (r.nccl_stream != nullptr) cudaStreamDestroy(r.nccl_stream);
    for (cudaEvent_t e : {r.copied, r.reduced_ready, r.done, r.nccl_in, r.nccl_out}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    FreeStaging(r);
  }
}

absl::Status CudaCommunicator::Check(absl::Span<Tensor* const> tensors) const {
  if (tensors.size() != ranks_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA all-reduce of ", tensors.size(),
                                                   " tensors over ", ranks_.size(), " devices"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor* t = tensors[i];
    const CudaBuffer* b = t != nullptr && t->buffer != nullptr ? AsCudaBuffer(t->buffer) : nullptr;
    if (b == nullptr || b->device_index() != ranks_[i].ordinal) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CUDA all-reduce: tensor ", i, " is not in the memory of ", ranks_[i].device->name()));
    }
    if (t->type != DType::kF32 || !t->IsContiguous() ||
        t->NumElements() != tensors[0]->NumElements()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CUDA all-reduce needs contiguous f32 tensors of one size, got ",
                       DescribeTensor(*t), " and ", DescribeTensor(*tensors[0])));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaCommunicator::AllReduce(absl::Span<Tensor* const> tensors) {
  TG_RETURN_IF_ERROR(Check(tensors));
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA communicator unusable after an earlier failure: ", broken_.message()));
  }
  const size_t count = static_cast<size_t>(tensors[0]->NumElements());
  const size_t bytes = count * sizeof(float);
  if (ranks_.size() == 1 && !options_.force.has_value()) return absl::OkStatus();
  last_ = ChooseAllReduce(bytes, topology_, options_.thresholds);
  if (options_.force.has_value()) last_.algorithm = *options_.force;
  const bool bf16 = last_.wire == WireType::kBF16;
  absl::Status s;
  if (last_.algorithm == AllReduceAlgorithm::kNccl) {
    s = NcclAllReduce(tensors, bf16);
  } else {
    for (size_t first = 0; first < count && s.ok(); first += kStagingElements) {
      const size_t piece = std::min(kStagingElements, count - first);
      s = last_.algorithm == AllReduceAlgorithm::kOneShot ? OneShot(tensors, first, piece, bf16)
                                                          : TwoShot(tensors, first, piece, bf16);
    }
  }
  if (!s.ok())
    return absl::Status(s.code(),
                        absl::StrCat(Describe(bytes, static_cast<int>(ranks_.size())), " (",
                                     AllReduceAlgorithmName(last_.algorithm), "): ", s.message()));
  return absl::OkStatus();
}

absl::Status CudaCommunicator::EnsureStaging(size_t bytes) {
  if (!ranks_.empty() && ranks_[0].stage_bytes >= bytes) return absl::OkStatus();
  for (Rank& r : ranks_) {
    TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(r.ordinal));
    FreeStaging(r);  // cudaFree waits for the work that still reads it.
    // Counted against the device's share, as its other memory is.
    if (!r.device->share().TryReserve(2 * bytes)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: no room in its share of the GPU for %.1f MiB of all-reduce staging",
                          r.device->name(), 2.0 * bytes / (1 << 20)));
    }
    r.stage_bytes = bytes;
    TG_CUDA_RETURN_IF_ERROR(cudaMalloc(&r.stage, bytes));
    TG_CUDA_RETURN_IF_ERROR(cudaMalloc(&r.reduced, bytes));
  }
  return absl::OkStatus();
}

void CudaCommunicator::FreeStaging(Rank& r) {
  if (r.stage != nullptr) cudaFree(r.stage);
  if (r.reduced != nullptr) cudaFree(r.reduced);
  if (r.stage_bytes > 0) r.device->share().Release(2 * r.stage_bytes);
  r.stage = r.reduced = nullptr;
  r.stage_bytes = 0;
}

// Rank `rank`'s legacy stream waits until every rank has recorded `event`.
absl::Status CudaCommunicator::WaitAll(int rank, cudaEvent_t Rank::*event) const {
  for (size_t s = 0; s < ranks_.size(); ++s) {
    if (static_cast<int>(s) == rank) continue;
    TG_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kLegacy, ranks_[s].*event, 0));
  }
  return absl::OkStatus();
}

absl::Status CudaCommunicator::StageInputs(absl::Span<Tensor* const> tensors, size_t first,
                                           size_t count, bool bf16) {
  TG_RETURN_IF_ERROR(
      EnsureStaging(std::min(kStagingElements, std::max<size_t>(count, 1)) * sizeof(float)));
  for (size_t r = 0; r < ranks_.size(); ++r) {
    TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[r].ordinal));
    // The others have finished reading this rank's staging of the previous piece or call.
    TG_RETURN_IF_ERROR(WaitAll(static_cast<int>(r), &Rank::done));
    TG_CUDA_RETURN_IF_ERROR(
        LaunchWireCopy(At(tensors[r], first), false, ranks_[r].stage, bf16, 0, count, kLegacy));
    TG_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks_[r].copied, kLegacy));
  }
  return absl::OkStatus();
}

absl::Status CudaCommunicator::OneShot(absl::Span<Tensor* const> tensors, size_t first,
                                       size_t count, bool bf16) {
  TG_RETURN_IF_ERROR(StageInputs(tensors, first, count, bf16));
  WireSources srcs;
  srcs.n = static_cast<int>(ranks_.size());
  for (int s = 0; s < srcs.n; ++s) srcs.p[s] = ranks_[s].stage;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[r].ordinal));
    TG_RETURN_IF_ERROR(WaitAll(static_cast<int>(r), &Rank::copied));
    TG_CUDA_RETURN_IF_ERROR(
        LaunchReduceRanks(srcs, bf16, At(tensors[r], first), false, 0, count, kLegacy));
    TG_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks_[r].done, kLegacy));
  }
  return absl::OkStatus();
}

absl::Status CudaCommunicator::TwoShot(absl::Span<Tensor* const> tensors, size_t first,
                                       size_t count, bool bf16) {
  TG_RETURN_IF_ERROR(StageInputs(tensors, first, count, bf16));
  const int n = static_cast<int>(ranks_.size());
  WireSources srcs;
  srcs.n = n;
  for (int s = 0; s < n; ++s) srcs.p[s] = ranks_[s].stage;
  for (int r = 0; r < n; ++r) {  // reduce-scatter: rank r sums chunk r.
    size_t b, e;
    TwoShotChunk(count, n, r, &b, &e);
    TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[r].ordinal));
    TG_RETURN_IF_ERROR(WaitAll(r, &Rank::copied));
    TG_CUDA_RETURN_IF_ERROR(LaunchReduceRanks(srcs, bf16, ranks_[r].reduced, bf16, b, e, kLegacy));
    TG_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks_[r].reduced_ready, kLegacy));
  }
  for (int r = 0; r < n; ++r) {  // all-gather: every rank copies every reduced chunk.
    TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[r].ordinal));
    TG_RETURN_IF_ERROR(WaitAll(r, &Rank::reduced_ready));
    for (int s = 0; s < n; ++s) {
      size_t b, e;
      TwoShotChunk(count, n, s, &b, &e);
      TG_CUDA_RETURN_IF_ERROR(
          LaunchWireCopy(ranks_[s].reduced, bf16, At(tensors[r], first), false, b, e, kLegacy));
    }
    TG_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks_[r].done, kLegacy));
  }
  return absl::OkStatus();
}

// Queues one NCCL all-reduce of elements [first, first + count) on every rank's NCCL stream
// (after its legacy stream's work), BF16 through the staging buffers when asked.
absl::Status CudaCommunicator::NcclQueue(absl::Span<Tensor* const> tensors, bool bf16, size_t first,
                                         size_t count) {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[r].ordinal));
    TG_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks_[r].nccl_in, kLegacy));
    TG_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(ranks_[r].nccl_stream, ranks_[r].nccl_in, 0));
    if (bf16) {
      TG_CUDA_RETURN_IF_ERROR(LaunchWireCopy(At(tensors[r], first), false, ranks_[r].stage, true, 0,
                                             count, ranks_[r].nccl_stream));
    }
  }
  TG_RETURN_IF_ERROR(nccl_->group_start() == kNcclSuccess ? absl::OkStatus()
                                                          : absl::InternalError("ncclGroupStart"));
  absl::Status queued;
  for (size_t r = 0; r < ranks_.size() && queued.ok(); ++r) {
    void* buf = bf16 ? ranks_[r].stage : At(tensors[r], first);
    const NcclResult res = nccl_->all_reduce(buf, buf, count, bf16 ? kNcclBfloat16 : kNcclFloat32,
                                             kNcclSum, ranks_[r].comm, ranks_[r].nccl_stream);
    if (res != kNcclSuccess) queued = NcclError(*nccl_, res, "ncclAllReduce");
  }
  const NcclResult ended = nccl_->group_end();
  if (queued.ok() && ended != kNcclSuccess && ended != kNcclInProgress) {
    queued = NcclError(*nccl_, ended, "ncclGroupEnd");
  }
  TG_RETURN_IF_ERROR(queued);
  for (size_t r = 0; r < ranks_.size(); ++r) {
    TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[r].ordinal));
    if (bf16) {
      TG_CUDA_RETURN_IF_ERROR(LaunchWireCopy(ranks_[r].stage, true, At(tensors[r], first), false, 0,
                                             count, ranks_[r].nccl_stream));
    }
    TG_CUDA_RETURN_IF_ERROR(cudaEventRecord(ranks_[r].nccl_out, ranks_[r].nccl_stream));
    TG_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kLegacy, ranks_[r].nccl_out, 0));
  }
  return absl::OkStatus();
}

absl::Status CudaCommunicator::NcclAllReduce(absl::Span<Tensor* const> tensors, bool bf16) {
  const size_t count = static_cast<size_t>(tensors[0]->NumElements());
  const size_t piece = bf16 ? kStagingElements : count;  // BF16 goes through the staging.
  if (bf16) TG_RETURN_IF_ERROR(EnsureStaging(std::min(count, kStagingElements) * sizeof(float)));
  absl::Status s;
  for (size_t first = 0; first < count && s.ok(); first += piece) {
    s = NcclQueue(tensors, bf16, first, std::min(piece, count - first));
    if (!s.ok()) break;
    // Waited for here, so that a failure or a hang becomes a status, never a stuck process.
    s = WaitForCollective(
        [&]() -> CollectiveProgress {
          CollectiveProgress p{true, absl::OkStatus()};
          for (const Rank& r : ranks_) {
            NcclResult async = kNcclSuccess;
            if (nccl_->comm_get_async_error(r.comm, &async) != kNcclSuccess ||
                (async != kNcclSuccess && async != kNcclInProgress)) {
              p.error = NcclError(*nccl_, async, "ncclCommGetAsyncError");
              return p;
            }
            const cudaError_t q = cudaEventQuery(r.nccl_out);
            if (q == cudaErrorNotReady) {
              p.done = false;
            } else if (q != cudaSuccess) {
              p.error = CudaError(q, "cudaEventQuery");
              return p;
            }
          }
          return p;
        },
        options_.timeout_us, "ncclAllReduce", WaitClock::Real());
  }
  if (!s.ok()) AbortNccl();
  if (!s.ok()) broken_ = s;
  return s;
}

void CudaCommunicator::AbortNccl() {
  for (Rank& r : ranks_) {
    if (r.comm != nullptr) nccl_->comm_abort(r.comm);
    r.comm = nullptr;
  }
}

}  // namespace tg::cuda
