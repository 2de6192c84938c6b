#include "backends/vulkan/vk_buffer.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/vulkan/vk_device.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

// Where bytes [offset, offset + size) of t start in `buffer`'s range, for a synchronous access:
// the range checked, and the work every stream of the device has submitted done.
absl::StatusOr<uint64_t> SyncAccessAt(const VulkanBuffer& buffer, const Tensor& t, size_t offset,
                                      size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(t, offset, size));
  TG_RETURN_IF_ERROR(buffer.device()->WaitForStreams());
  return buffer.OffsetOf(t.data) + offset;
}

// A buffer's base: host memory's mapped address, device memory's device address.
void* BaseOf(const VulkanBufferType& type, const MemoryRange& range) {
  return type.is_host() ? static_cast<void*>(range.mapped())
                        : reinterpret_cast<void*>(static_cast<uintptr_t>(range.address()));
}

}  // namespace

VulkanBufferType::VulkanBufferType(VulkanDevice* device, bool host)
    : device_(device), host_(host), name_(absl::StrCat(device->name(), host ? "_Host" : "")) {}

Device* VulkanBufferType::device() const { return device_; }

size_t VulkanBufferType::max_size() const { return device_->info().max_allocation; }

absl::StatusOr<std::unique_ptr<Buffer>> VulkanBufferType::Allocate(size_t size) {
  TG_RETURN_IF_ERROR(device_->Ready());
  MemoryPool& pool = host_ ? device_->host_memory() : device_->device_memory();
  TG_ASSIGN_OR_RETURN(MemoryRange range, pool.Allocate(size, alignment()));
  return std::unique_ptr<Buffer>(new VulkanBuffer(this, range, size));
}

VulkanBuffer::VulkanBuffer(VulkanBufferType* type, MemoryRange range, size_t size)
    : BasicBuffer(type, BaseOf(*type, range), size), range_(range) {}

VulkanBuffer::~VulkanBuffer() {
  // Kernels still queued may use the memory: let them finish before it is handed out again.
  device()->WaitForStreams().IgnoreError();
  MemoryPool& pool = host() ? device()->host_memory() : device()->device_memory();
  pool.Free(range_);
}

VulkanBuffer* BufferOn(const VulkanDevice* device, const Tensor& t) {
  auto* b = dynamic_cast<VulkanBuffer*>(t.buffer);
  return b != nullptr && b->device() == device ? b : nullptr;
}

absl::Status VulkanBuffer::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  TG_ASSIGN_OR_RETURN(const uint64_t at, SyncAccessAt(*this, *t, offset, size));
  if (size == 0) return absl::OkStatus();  // `data` may be null (memcpy's may not).
  if (uint8_t* p = range_.mapped()) {
    std::memcpy(p + at, data, size);
    return absl::OkStatus();
  }
  return device()->transfers().Write(range_, at, data, size);
}

absl::Status VulkanBuffer::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  TG_ASSIGN_OR_RETURN(const uint64_t at, SyncAccessAt(*this, *t, offset, size));
  if (size == 0) return absl::OkStatus();
  if (const uint8_t* p = range_.mapped()) {
    std::memcpy(data, p + at, size);
    return absl::OkStatus();
  }
  return device()->transfers().Read(range_, at, data, size);
}

absl::Status VulkanBuffer::MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) {
  TG_ASSIGN_OR_RETURN(const uint64_t at, SyncAccessAt(*this, *t, offset, size));
  if (size == 0) return absl::OkStatus();  // `data` may be null (memcpy's may not).
  if (uint8_t* p = range_.mapped()) {
    std::memset(p + at, value, size);
    return absl::OkStatus();
  }
  return device()->transfers().Fill(range_, at, value, size);
}

absl::Status VulkanBuffer::Clear(uint8_t value) {
  TG_RETURN_IF_ERROR(device()->WaitForStreams());
  if (uint8_t* p = range_.mapped()) {
    std::memset(p, value, size());
    return absl::OkStatus();
  }
  return device()->transfers().Fill(range_, 0, value, size());
}

absl::Status VulkanBuffer::CopyFrom(const Tensor* src, Tensor* dst) {
  if (src->buffer == nullptr) return absl::FailedPreconditionError("copy from an unplaced tensor");
  const size_t n = src->NumBytes();
  if (n != dst->NumBytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s copy: %d bytes into %d", device()->name(), n, dst->NumBytes()));
  }
  TG_RETURN_IF_ERROR(CheckTensorRange(*dst, 0, n));
  if (src->buffer->type()->is_host()) return SetTensor(dst, src->data, 0, n);
  auto* from = dynamic_cast<VulkanBuffer*>(src->buffer);
  if (from == nullptr)
    return absl::UnimplementedError("Vulkan: direct copy only from Vulkan or host memory");
  TG_RETURN_IF_ERROR(CheckTensorRange(*src, 0, n));
  if (from->device() == device()) {
    TG_RETURN_IF_ERROR(device()->WaitForStreams());
    return device()->transfers().Copy(from->range_, from->OffsetOf(src->data), range_,
                                      OffsetOf(dst->data), n);
  }
  // Another Vulkan device: through the host, straight from its mapping when it has one.
  TG_RETURN_IF_ERROR(from->device()->WaitForStreams());
  if (const uint8_t* p = from->range_.mapped()) {
    return SetTensor(dst, p + from->OffsetOf(src->data), 0, n);
  }
  std::vector<uint8_t> bounce(n);
  TG_RETURN_IF_ERROR(from->GetTensor(src, bounce.data(), 0, n));
  return SetTensor(dst, bounce.data(), 0, n);
}

}  // namespace tg::vulkan
