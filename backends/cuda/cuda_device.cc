#include "backends/cuda/cuda_device.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_collectives.h"
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
// between the others are staged through the host by the runtime); slices of one GPU share
// its memory already.
void EnablePeerAccess(const std::vector<std::unique_ptr<CudaDevice>>& devices) {
  for (const auto& a : devices) {
    for (const auto& b : devices) {
      if (a->index() == b->index()) continue;
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

// A slice's own stream-ordered pool, so that the slices of a split GPU do not share cached
// scratch (as separate GPUs would not); nullptr where the GPU has no memory pools.
cudaMemPool_t CreateSlicePool(int ordinal) {
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  cudaMemPool_t pool = nullptr;
  if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return pool;
}

}  // namespace

void CudaNotice(const std::string& line) {
  const char* quiet = std::getenv("TG_CUDA_QUIET");
  if (quiet != nullptr && *quiet != '\0' && std::string(quiet) != "0") return;
  std::fprintf(stderr, "tensorgrid: %s\n", line.c_str());
}

absl::StatusOr<int> CudaGpuQuery::Count() const { return CudaDeviceCount(); }

absl::StatusOr<PhysicalGpu> CudaGpuQuery::Describe(int ordinal) const {
  PhysicalGpu g;
  g.ordinal = ordinal;
  cudaDeviceProp prop;
  TG_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  g.name = prop.name;
  g.cc = prop.major * 10 + prop.minor;
  g.integrated = prop.integrated != 0;
  g.total_memory = prop.totalGlobalMem;
  char bus_id[64] = {};
  TG_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), ordinal));
  TG_ASSIGN_OR_RETURN(g.pci_id, PciDeviceId(bus_id));
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  if (const cudaError_t err = CheckKernelImage(); err != cudaSuccess) {
    const absl::Status s = CudaError(err, "cudaFuncGetAttributes");
    return absl::FailedPreconditionError(absl::StrFormat(
        "CUDA%d (%s, compute capability %d.%d) cannot run this build's kernels (built for CUDA "
        "architectures %s; rebuild with -DTG_CUDA_ARCHS=%d): %s",
        ordinal, g.name, prop.major, prop.minor, TG_CUDA_ARCHS_STRING, g.cc, s.message()));
  }
  return g;
}

CudaDevice::CudaDevice(const VirtualGpu& gpu, BufferType* host_type, Collectives* collectives)
    : gpu_(gpu),
      host_type_(host_type),
      collectives_(collectives),
      share_(gpu.n_slices > 1 ? gpu.memory_share : SIZE_MAX) {}

CudaDevice::~CudaDevice() {
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(const VirtualGpu& gpu,
                                                               BufferType* host_type,
                                                               Collectives* collectives) {
  std::unique_ptr<CudaDevice> d(new CudaDevice(gpu, host_type, collectives));
  d->name_ = gpu.name;
  d->id_ = gpu.id;
  d->integrated_ = gpu.gpu.integrated;
  d->description_ = absl::StrFormat("%s (compute capability %d.%d)", gpu.gpu.name, gpu.gpu.cc / 10,
                                    gpu.gpu.cc % 10);
  if (gpu.n_slices > 1) {
    absl::StrAppendFormat(&d->description_, ", slice %d of %d (TG_CUDA_DEVICES)", gpu.slice + 1,
                          gpu.n_slices);
  }
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, gpu.gpu.ordinal) !=
      cudaSuccess) {
    cudaGetLastError();
    pools = 0;
  }
  d->memory_pools_ = pools != 0;
  TG_CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu.gpu.ordinal));
  if (d->memory_pools_ && gpu.n_slices > 1) d->pool_ = CreateSlicePool(gpu.gpu.ordinal);
  return d;
}

DeviceMemory CudaDevice::memory() const {
  size_t free = 0, total = 0;
  if (cudaSetDevice(index()) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  if (gpu_.n_slices == 1) return {free, total};
  return share_.Report({free, total});
}

absl::StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream() {
  TG_ASSIGN_OR_RETURN(std::unique_ptr<CudaStream> s, CudaStream::Create(this));
  return std::unique_ptr<Stream>(std::move(s));
}

bool CudaDevice::SupportsOp(const Tensor& node) const { return CudaSupportsOp(node); }

bool CudaDevice::OffloadOp(const Tensor& node) const { return CudaOffloadOp(node); }

absl::StatusOr<std::unique_ptr<Event>> CudaDevice::CreateEvent() {
  TG_ASSIGN_OR_RETURN(std::unique_ptr<CudaEvent> e, CudaEvent::Create(index()));
  return std::unique_ptr<Event>(std::move(e));
}

absl::StatusOr<int> CudaDeviceCount() {
  int n = 0;  // left as it is when there is no driver.
  TG_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&n));
  return n;
}

CudaFamily::CudaFamily() : collectives_(std::make_unique<CudaCollectives>()) {}

CudaFamily::~CudaFamily() {
  devices_.clear();  // before the collectives they point to.
}

absl::StatusOr<std::unique_ptr<CudaFamily>> CudaFamily::Create(std::vector<std::string>* notes) {
  TG_ASSIGN_OR_RETURN(const int n_split, ParseCudaDevices(std::getenv("TG_CUDA_DEVICES")));
  TG_ASSIGN_OR_RETURN(CudaDevicePlan plan, PlanCudaDevices(CudaGpuQuery(), n_split));
  for (std::string& note : plan.notes) notes->push_back(std::move(note));
  std::unique_ptr<CudaFamily> family(new CudaFamily());
  for (const VirtualGpu& gpu : plan.devices) {
    absl::StatusOr<std::unique_ptr<CudaDevice>> d =
        CudaDevice::Create(gpu, &family->host_type_, family->collectives_.get());
    if (!d.ok()) {
      notes->push_back(absl::StrCat(gpu.name, " skipped: ", d.status().message()));
      continue;
    }
    family->devices_.push_back(std::move(*d));
  }
  if (family->devices_.empty()) return absl::UnavailableError("no CUDA device could be set up");
  EnablePeerAccess(family->devices_);
  return family;
}

std::vector<Device*> CudaFamily::devices() {
  std::vector<Device*> out;
  for (auto& d : devices_) out.push_back(d.get());
  return out;
}

namespace {

// CUDA's version encoding (1000 * major + 10 * minor) as "major.minor".
std::string CudaVersionName(int version) {
  return absl::StrFormat("%d.%d", version / 1000, version % 1000 / 10);
}

// Whether an NVIDIA driver is installed at all: the runtime loads libcuda.so.1 itself and
// reports its absence as an insufficient driver, which would read like a version problem.
bool DriverInstalled() {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

}  // namespace

std::string CudaUnavailableLine(const absl::Status& why, bool driver_installed,
                                int driver_version, int runtime_version, bool verbose) {
  if (!driver_installed) {
    if (!verbose) return "";
    return "CUDA unavailable: no NVIDIA driver is installed (libcuda.so.1 not found); using the "
           "other devices";
  }
  if (driver_version > 0 && runtime_version > 0 && driver_version < runtime_version) {
    return absl::StrCat("CUDA unavailable: the NVIDIA driver supports CUDA up to ",
                        CudaVersionName(driver_version), " but this build's runtime is CUDA ",
                        CudaVersionName(runtime_version),
                        " (update the driver); using the other devices");
  }
  return absl::StrCat("CUDA unavailable (", why.message(), "); using the other devices");
}

absl::Status RegisterCudaFamily(bool verbose) {
  static absl::Mutex mu(absl::kConstInit);
  static bool done = false;
  absl::MutexLock lock(&mu);
  if (done) return absl::OkStatus();
  done = true;
  std::vector<std::string> notes;
  absl::StatusOr<std::unique_ptr<CudaFamily>> family = CudaFamily::Create(&notes);
  for (const std::string& note : notes) CudaNotice(note);
  if (absl::IsInvalidArgument(family.status())) return family.status();  // TG_CUDA_DEVICES.
  if (!family.ok()) {
    const bool installed = DriverInstalled();
    int driver_version = 0, runtime_version = 0;
    if (installed && cudaDriverGetVersion(&driver_version) != cudaSuccess) driver_version = 0;
    if (cudaRuntimeGetVersion(&runtime_version) != cudaSuccess) runtime_version = 0;
    cudaGetLastError();  // neither query leaves an error behind for later calls.
    const std::string line = CudaUnavailableLine(family.status(), installed, driver_version,
                                                 runtime_version, verbose);
    if (!line.empty()) CudaNotice(line);
    return absl::OkStatus();
  }
  return Registry::Get().Register(std::move(*family));
}

}  // namespace tg::cuda
