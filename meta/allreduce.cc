#include "meta/allreduce.h"

#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/fp16.h"
#include "core/status_macros.h"

namespace tg::meta {
namespace {

// Chunk bounds fall on 64-byte lines so that ranks writing neighbouring chunks never share
// a cache line.
constexpr size_t kChunkAlign = 16;

size_t ChunkBound(size_t count, int n, int i) {
  const size_t raw = count * static_cast<size_t>(i) / static_cast<size_t>(n);
  return std::min(count, (raw + kChunkAlign - 1) / kChunkAlign * kChunkAlign);
}

void AddInto(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void Pack(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToBF16(src[i]);
}

}  // namespace

AllReduceTraffic& AllReduceTraffic::Get() {
  static AllReduceTraffic traffic;
  return traffic;
}

absl::StatusOr<std::unique_ptr<AllReducer>> AllReducer::Create(std::vector<Device*> devices,
                                                               AllReduceOptions options) {
  if (devices.empty()) return absl::InvalidArgumentError("all-reduce over no devices");
  std::unique_ptr<AllReducer> r(new AllReducer(std::move(devices), options));
  Collectives* c = r->devices_[0]->collectives();
  bool shared = options.use_collectives && c != nullptr && r->devices_.size() > 1;
  for (Device* d : r->devices_) shared = shared && d->collectives() == c;
  if (shared) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm = c->Init(r->devices_);
    // A family that cannot set up its collectives here still gets the generic algorithm.
    if (comm.ok()) r->communicator_ = std::move(*comm);
  }
  return r;
}

AllReducer::AllReducer(std::vector<Device*> devices, AllReduceOptions options)
    : devices_(std::move(devices)), options_(options) {
  const size_t n = devices_.size();
  staging_.resize(n);
  spare_.resize(n);
  wire_.resize(n);
}

AllReducer::~AllReducer() = default;

const char* AllReducer::AlgorithmFor(size_t bytes) const {
  if (communicator_ != nullptr) return "collectives";
  const bool ring = options_.algorithm == AllReduceOptions::Algorithm::kRing ||
                    (options_.algorithm == AllReduceOptions::Algorithm::kAuto &&
                     bytes >= options_.ring_min_bytes);
  if (!ring) return "butterfly";
  return bytes >= options_.bf16_min_bytes ? "ring-bf16" : "ring";
}

absl::Status AllReducer::Check(absl::Span<Tensor* const> tensors) const {
  if (tensors.size() != devices_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("all-reduce of ", tensors.size(),
                                                   " tensors over ", devices_.size(), " devices"));
  }
  for (const Tensor* t : tensors) {
    if (t == nullptr || t->data == nullptr || t->buffer == nullptr) {
      return absl::InvalidArgumentError("all-reduce of a missing or unplaced tensor");
    }
    if (t->type != DType::kF32 || !t->IsContiguous() ||
        t->NumElements() != tensors[0]->NumElements()) {
      return absl::InvalidArgumentError(
          absl::StrCat("all-reduce needs contiguous f32 tensors of one size, got ",
                       DescribeTensor(*t), " and ", DescribeTensor(*tensors[0])));
    }
  }
  return absl::OkStatus();
}

bool AllReducer::HostDirect(absl::Span<Tensor* const> tensors) const {
  if (options_.force_staging) return false;
  for (const Tensor* t : tensors) {
    if (!t->buffer->type()->is_host()) return false;
  }
  return true;
}

absl::Status AllReducer::RunRank(int rank, absl::Span<Tensor* const> tensors, Barrier& barrier,
                                 bool wait_for_peers) {
  absl::Status status = Check(tensors);
  if (!status.ok()) return status;  // every rank sees the same error: no barrier skipped.
  const int n = n_ranks();
  if (n == 1) return absl::OkStatus();
  if (communicator_ != nullptr) {
    barrier.Wait();
    if (rank == 0) communicator_status_ = communicator_->AllReduce(tensors);
    barrier.Wait();
    return communicator_status_;
  }
  Tensor* t = tensors[rank];
  const size_t count = static_cast<size_t>(t->NumElements());
  const size_t bytes = count * sizeof(float);
  const bool direct = HostDirect(tensors);
  if (!direct) {
    AllReduceTraffic& traffic = AllReduceTraffic::Get();
    if (rank == 0) traffic.staged.fetch_add(1);
    if (!t->buffer->type()->is_host()) traffic.staged_bytes.fetch_add(2 * bytes);
    // Host copies: each rank's must be there before any rank reads it.
    staging_[rank].resize(count);
    status = t->buffer->GetTensor(t, staging_[rank].data(), 0, bytes);
    barrier.Wait();
  }
  absl::InlinedVector<float*, 8> data(n);
  for (int r = 0; r < n; ++r) {
    data[r] = direct ? static_cast<float*>(tensors[r]->data) : staging_[r].data();
  }
  const char* algorithm = AlgorithmFor(bytes);
  const bool bf16 = std::strcmp(algorithm, "ring-bf16") == 0;
  // Staging and BF16 mailboxes are reused by the next call: finish together then.
  const bool settle = wait_for_peers || !direct || bf16;
  if (algorithm[0] == 'r') {
    Ring(rank, count, data, bf16, settle, barrier);
  } else {
    Butterfly(rank, count, data, settle, barrier);
  }
  if (!direct && status.ok()) status = t->buffer->SetTensor(t, data[rank], 0, bytes);
  return status;
}

void AllReducer::Ring(int rank, size_t count, absl::Span<float* const> data, bool bf16, bool settle,
                      Barrier& barrier) {
  const int n = n_ranks();
  const int left = (rank + n - 1) % n;
  float* own = data[rank];
  const float* lf = data[left];
  size_t max_chunk = 0;
  for (int i = 0; i < n; ++i) {
    max_chunk = std::max(max_chunk, ChunkBound(count, n, i + 1) - ChunkBound(count, n, i));
  }
  // BF16 mailboxes, two per rank: at each step ranks read one and write the other.
  auto mailbox = [&](int r, int slot) { return wire_[r].data() + slot * max_chunk; };
  auto chunk = [&](int i, size_t* b, size_t* e) {
    *b = ChunkBound(count, n, i);
    *e = ChunkBound(count, n, i + 1);
  };
  size_t b;
  size_t e;
  if (bf16) {
    wire_[rank].resize(2 * max_chunk);
    chunk(rank, &b, &e);
    Pack(own + b, mailbox(rank, 0), e - b);
    barrier.Wait();
  }
  // Reduce-scatter: after step s, rank r holds the sum of s + 2 ranks in chunk r - s - 1.
  for (int s = 0; s + 1 < n; ++s) {
    chunk((rank - s - 1 + 2 * n) % n, &b, &e);
    if (bf16) {
      const uint16_t* in = mailbox(left, s % 2);
      for (size_t i = b; i < e; ++i) own[i] += BF16ToFloat(in[i - b]);
      if (s + 2 == n) {  // this rank's final chunk: round it as the others will see it.
        for (size_t i = b; i < e; ++i) own[i] = BF16ToFloat(FloatToBF16(own[i]));
      }
      Pack(own + b, mailbox(rank, (s + 1) % 2), e - b);
    } else {
      AddInto(own + b, lf + b, e - b);
    }
    barrier.Wait();
  }
  // All-gather: each step passes every finished chunk one rank to the right.
  for (int s = 0; s + 1 < n; ++s) {
    chunk((rank - s + n) % n, &b, &e);
    if (bf16) {
      const uint16_t* in = mailbox(left, (n - 1 + s) % 2);
      for (size_t i = b; i < e; ++i) own[i] = BF16ToFloat(in[i - b]);
      if (s + 2 < n) std::memcpy(mailbox(rank, (n + s) % 2), in, (e - b) * sizeof(uint16_t));
    } else {
      std::memcpy(own + b, lf + b, (e - b) * sizeof(float));
    }
    // The last step's reads are of tensors that stay as they are (see RunRank).
    if (s + 2 < n || settle) barrier.Wait();
  }
}

void AllReducer::Butterfly(int rank, size_t count, absl::Span<float* const> data, bool settle,
                           Barrier& barrier) {
  const int n = n_ranks();
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  spare_[rank].resize(count);
  auto buffer = [&](int r, int which) { return which == 0 ? data[r] : spare_[r].data(); };
  // Ranks beyond the largest power of two fold into a partner first.
  if (n > p2) {
    if (rank < n - p2) AddInto(data[rank], data[rank + p2], count);
    barrier.Wait();
  }
  // Recursive doubling among the first p2 ranks; results alternate between two buffers so
  // that a partner's input is never overwritten while it is read.
  int cur = 0;
  for (int bit = 1; bit < p2; bit <<= 1, cur ^= 1) {
    if (rank < p2) {
      const float* a = buffer(rank, cur);
      const float* b = buffer(rank ^ bit, cur);
      float* dst = buffer(rank, cur ^ 1);
      for (size_t i = 0; i < count; ++i) dst[i] = a[i] + b[i];
    }
    barrier.Wait();
  }
  if (rank < p2) {
    if (cur == 1) std::memcpy(data[rank], spare_[rank].data(), count * sizeof(float));
  } else {
    std::memcpy(data[rank], buffer(rank - p2, cur), count * sizeof(float));
  }
  // The folded-in ranks read their partner's buffers until here.
  if (n > p2 || settle) barrier.Wait();
}

absl::Status AllReducer::Run(absl::Span<Tensor* const> tensors) {
  if (pool_ == nullptr) {
    pool_ = std::make_unique<ThreadPool>(n_ranks());
    pool_barrier_ = std::make_unique<Barrier>(n_ranks());
  }
  std::vector<absl::Status> statuses(n_ranks());
  pool_->Run([&](int r) { statuses[r] = RunRank(r, tensors, *pool_barrier_, true); });
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status AllReducer::Queue(absl::Span<Tensor* const> tensors) {
  if (!QueuesOnly()) {
    return absl::FailedPreconditionError("this all-reduce runs on host threads, not queued");
  }
  TG_RETURN_IF_ERROR(Check(tensors));
  return n_ranks() == 1 ? absl::OkStatus() : communicator_->AllReduce(tensors);
}

}  // namespace tg::meta
