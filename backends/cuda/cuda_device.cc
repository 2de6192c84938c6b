#include "backends/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_event.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cuda_stream.h"
#include "backends/cuda/cuda_support.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/pci_id.h"
#include "core/status_macros.h"

#ifndef TG_CUDA_ARCHS_STRING
#define TG_CUDA_ARCHS_STRING "?"
#endif

namespace tg::cuda {
namespace {

// Lets every pair of GPUs that can reach each other over the bus copy directly (peer copies
// between the others are staged through the host by the runtime).
void EnablePeerAccess(const std::vector<std::unique_ptr<CudaDevice>>& devices) {
  for (const auto& a : devices) {
    for (const auto& b : devices) {
      if (a == b) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, a->index(), b->index()) != cudaSuccess || !can) {
        cudaGetLastError();
        continue;
      }
      if (cudaSetDevice(a->index()) == cudaSuccess) cudaDeviceEnablePeerAccess(b->index(), 0);
      cudaGetLastError();  // cudaErrorPeerAccessAlreadyEnabled is fine.
    }
  }
}

}  // namespace

void CudaNotice(const std::string& line) {
  const char* quiet = std::getenv("TG_CUDA_QUIET");
  if (quiet != nullptr && *quiet != '\0' && std::string(quiet) != "0") return;
  std::fprintf(stderr, "tensorgrid: %s\n", line.c_str());
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int index, BufferType* host_type) {
  std::unique_ptr<CudaDevice> d(new CudaDevice(index, host_type));
  d->name_ = absl::StrCat("CUDA", index);
  cudaDeviceProp prop;
  TG_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, index));
  d->cc_ = prop.major * 10 + prop.minor;
  d->integrated_ = prop.integrated != 0;
  d->description_ =
      absl::StrFormat("%s (compute capability %d.%d)", prop.name, prop.major, prop.minor);
  char bus_id[64] = {};
  TG_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), index));
  TG_ASSIGN_OR_RETURN(d->id_, PciDeviceId(bus_id));
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, index) != cudaSuccess) {
    cudaGetLastError();
    pools = 0;
  }
  d->memory_pools_ = pools != 0;
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  if (const cudaError_t err = CheckKernelImage(); err != cudaSuccess) {
    const absl::Status s = CudaError(err, "cudaFuncGetAttributes");
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s (%s) cannot run this build's kernels (built for CUDA architectures %s; rebuild "
        "with -DTG_CUDA_ARCHS=%d): %s",
        d->name_, d->description_, TG_CUDA_ARCHS_STRING, d->cc_, s.message()));
  }
  return d;
}

DeviceMemory CudaDevice::memory() const {
  size_t free = 0, total = 0;
  if (cudaSetDevice(index_) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return {free, total};
}

absl::StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream() {
  TG_ASSIGN_OR_RETURN(std::unique_ptr<CudaStream> s, CudaStream::Create(this));
  return std::unique_ptr<Stream>(std::move(s));
}

bool CudaDevice::SupportsOp(const Tensor& node) const { return CudaSupportsOp(node); }

bool CudaDevice::OffloadOp(const Tensor& node) const { return CudaOffloadOp(node); }

absl::StatusOr<std::unique_ptr<Event>> CudaDevice::CreateEvent() {
  TG_ASSIGN_OR_RETURN(std::unique_ptr<CudaEvent> e, CudaEvent::Create(index_));
  return std::unique_ptr<Event>(std::move(e));
}

absl::StatusOr<int> CudaDeviceCount() {
  int n = 0;  // left as it is when there is no driver.
  TG_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&n));
  return n;
}

absl::StatusOr<std::unique_ptr<CudaFamily>> CudaFamily::Create(std::vector<std::string>* notes) {
  TG_ASSIGN_OR_RETURN(const int n, CudaDeviceCount());
  if (n == 0) return absl::UnavailableError("cudaGetDeviceCount: no CUDA devices");
  std::unique_ptr<CudaFamily> family(new CudaFamily());
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<CudaDevice>> d = CudaDevice::Create(i, &family->host_type_);
    if (!d.ok()) {
      notes->push_back(absl::StrCat("CUDA device ", i, " skipped: ", d.status().message()));
      continue;
    }
    family->devices_.push_back(std::move(*d));
  }
  if (family->devices_.empty()) {
    return absl::UnavailableError(absl::StrCat("none of the ", n, " CUDA devices can be used"));
  }
  EnablePeerAccess(family->devices_);
  return family;
}

std::vector<Device*> CudaFamily::devices() {
  std::vector<Device*> out;
  for (auto& d : devices_) out.push_back(d.get());
  return out;
}

absl::Status RegisterCudaFamily() {
  static absl::Mutex mu(absl::kConstInit);
  static bool done = false;
  absl::MutexLock lock(&mu);
  if (done) return absl::OkStatus();
  done = true;
  std::vector<std::string> notes;
  absl::StatusOr<std::unique_ptr<CudaFamily>> family = CudaFamily::Create(&notes);
  for (const std::string& note : notes) CudaNotice(note);
  if (!family.ok()) {
    CudaNotice(absl::StrCat("CUDA unavailable (", family.status().message(),
                            "); using the other devices"));
    return absl::OkStatus();
  }
  return Registry::Get().Register(std::move(*family));
}

}  // namespace tg::cuda
