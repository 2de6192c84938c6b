#include "backends/cpu/cpu_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"

namespace tg::cpu {
namespace {

// Buffers of kHugePageMinBytes and more (weights, KV caches) are aligned to 2 MiB, rounded up
// to it, and asked to be backed by 2 MiB pages: a decode streams every weight once a token,
// and with 4 KiB pages a 2048-wide Q4_0 model ran at 0.93x (143-145 against 152-156 t/s, Zen 4
// VM, 3 interleaved rounds): a TLB miss every 4 KiB, and the hardware prefetcher stops at each
// page's end. The rounding costs at most 1/8 of such a buffer.
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugePageMinBytes = size_t{16} << 20;

absl::Status ReadOnly(const Tensor& t) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "CPU: tensor '%s' lies in read-only host memory (a mapped file); it cannot be written",
      t.name));
}

// GetTensor of host memory: the checks, then a memcpy.
absl::Status ReadHostTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  if (absl::Status s = CheckTensorRange(*t, offset, size); !s.ok()) return s;
  if (size == 0) return absl::OkStatus();
  std::memcpy(data, static_cast<const uint8_t*>(t->data) + offset, size);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Buffer>> CpuBufferType::Allocate(size_t size) {
  // Rounding a size this close to SIZE_MAX up would wrap to a small (or no) allocation
  // that claims `size` bytes.
  if (size > SIZE_MAX - (kCpuAlignment - 1)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("CPU: cannot allocate %d bytes (more than the address space)", size));
  }
  const size_t align = size >= kHugePageMinBytes && size <= SIZE_MAX - (kHugePageBytes - 1)
                           ? kHugePageBytes
                           : kCpuAlignment;
  const size_t rounded = (size + align - 1) / align * align;
  void* data = rounded == 0 ? nullptr : std::aligned_alloc(align, rounded);
  if (data == nullptr && rounded != 0) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("CPU: cannot allocate %.1f MiB", rounded / 1048576.0));
  }
#if defined(MADV_HUGEPAGE)
  // A hint: where the kernel has no huge pages to give, the buffer works all the same.
  if (align == kHugePageBytes) ::madvise(data, rounded, MADV_HUGEPAGE);
#endif
  return std::make_unique<CpuBuffer>(this, data, size);
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuMappedBufferType::FromHostPtr(const void* data,
                                                                         size_t size) {
  if (reinterpret_cast<uintptr_t>(data) % kCpuMappedAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CPU: host memory at %p is not %d-byte aligned", data, kCpuMappedAlignment));
  }
  return std::make_unique<CpuMappedBuffer>(this, data, size);
}

CpuBuffer::~CpuBuffer() { std::free(base()); }

absl::Status CpuBuffer::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  if (absl::Status s = CheckTensorRange(*t, offset, size); !s.ok()) return s;
  if (size == 0) return absl::OkStatus();  // `data` may be null (memcpy's may not).
  std::memcpy(static_cast<uint8_t*>(t->data) + offset, data, size);
  return absl::OkStatus();
}

absl::Status CpuBuffer::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  return ReadHostTensor(t, data, offset, size);
}

absl::Status CpuBuffer::MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) {
  if (absl::Status s = CheckTensorRange(*t, offset, size); !s.ok()) return s;
  std::memset(static_cast<uint8_t*>(t->data) + offset, value, size);
  return absl::OkStatus();
}

absl::Status CpuBuffer::CopyFrom(const Tensor* src, Tensor* dst) {
  if (src->buffer == nullptr || !src->buffer->type()->is_host()) {
    return absl::UnimplementedError("CPU: direct copy only from host memory");
  }
  if (src->NumBytes() != dst->NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CPU copy: %d bytes into %d", src->NumBytes(), dst->NumBytes()));
  }
  return SetTensor(dst, src->data, 0, src->NumBytes());
}

absl::Status CpuBuffer::Clear(uint8_t value) {
  if (base() != nullptr) std::memset(base(), value, size());
  return absl::OkStatus();
}

absl::Status CpuMappedBuffer::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  if (absl::Status s = CheckTensorRange(*t, offset, size); !s.ok()) return s;
  return size == 0 ? absl::OkStatus() : ReadOnly(*t);
}

absl::Status CpuMappedBuffer::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  return ReadHostTensor(t, data, offset, size);
}

absl::Status CpuMappedBuffer::MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) {
  if (absl::Status s = CheckTensorRange(*t, offset, size); !s.ok()) return s;
  return size == 0 ? absl::OkStatus() : ReadOnly(*t);
}

absl::Status CpuMappedBuffer::SetTensor2D(Tensor* t, const void* data, const StridedRange& r) {
  if (absl::Status s = CheckTensorRange2D(*t, r); !s.ok()) return s;
  return r.n_rows == 0 || r.row_size == 0 ? absl::OkStatus() : ReadOnly(*t);
}

absl::Status CpuMappedBuffer::Clear(uint8_t value) {
  return absl::FailedPreconditionError(
      "CPU: a buffer over read-only host memory (a mapped file) cannot be cleared");
}

}  // namespace tg::cpu
