// NCCL, loaded with dlopen on first use instead of linked: a binary built with CUDA must run
// where NCCL is not installed (it then says so once and the collectives use the
// peer-to-peer all-reduce). The few types and entry points used are declared here with
// nccl.h's values (stable since NCCL 2.10, checked against nccl.h by the unit test where the
// header exists), so a build needs no NCCL headers. Thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_NCCL_LOADER_H_
#define TENSORGRID_BACKENDS_CUDA_NCCL_LOADER_H_

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg::cuda {

// The oldest NCCL with BF16 reductions (ncclBfloat16 came in 2.10).
inline constexpr int kMinNcclVersion = 21000;

struct NcclCommOpaque;
using NcclComm = NcclCommOpaque*;  // ncclComm_t.
enum NcclResult : int {            // ncclResult_t.
  kNcclSuccess = 0,
  kNcclUnhandledCudaError = 1,
  kNcclSystemError = 2,
  kNcclInternalError = 3,
  kNcclInvalidArgument = 4,
  kNcclInvalidUsage = 5,
  kNcclRemoteError = 6,
  kNcclInProgress = 7,
};
enum NcclDataType : int { kNcclFloat32 = 7, kNcclBfloat16 = 9 };  // ncclDataType_t.
enum NcclRedOp : int { kNcclSum = 0 };                            // ncclRedOp_t.

struct NcclApi {
  int version = 0;  // e.g. 22805 for 2.28.5.
  NcclResult (*get_version)(int*);
  NcclResult (*comm_init_all)(NcclComm*, int, const int*);
  NcclResult (*comm_destroy)(NcclComm);
  NcclResult (*comm_abort)(NcclComm);
  NcclResult (*comm_get_async_error)(NcclComm, NcclResult*);
  const char* (*get_error_string)(NcclResult);
  NcclResult (*all_reduce)(const void*, void*, size_t, NcclDataType, NcclRedOp, NcclComm,
                           cudaStream_t);
  NcclResult (*group_start)();
  NcclResult (*group_end)();
};

// Loads NCCL from the first of `candidates` (sonames or paths) that has every entry point
// and is at least kMinNcclVersion; NOT_FOUND naming what each candidate lacked otherwise.
absl::StatusOr<NcclApi> LoadNccl(const std::vector<std::string>& candidates);

// The candidates tried by Nccl(): $TG_NCCL_LIBRARY if set, libnccl.so.2 from the library
// path, then the build machine's toolkit directory.
std::vector<std::string> NcclCandidates();

// The process's NCCL, loaded on first use; the answer never changes afterwards.
absl::StatusOr<const NcclApi*> Nccl();

// "call: <NCCL's description> (ncclResult_t n)": UNAVAILABLE for system and remote errors (a
// link or peer went away), INTERNAL otherwise.
absl::Status NcclError(const NcclApi& api, NcclResult result, absl::string_view call);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_NCCL_LOADER_H_
