#include "core/backend.h"

#include "absl/strings/str_format.h"

namespace tg {

absl::string_view DeviceTypeName(DeviceType type) {
  switch (type) {
    case DeviceType::kCpu: return "CPU";
    case DeviceType::kGpu: return "GPU";
    case DeviceType::kIgpu: return "IGPU";
    case DeviceType::kAccel: return "ACCEL";
    case DeviceType::kRemote: return "REMOTE";
  }
  return "UNKNOWN";
}

absl::Status CheckTensorRange(const Tensor& t, size_t offset, size_t size) {
  if (t.buffer == nullptr || t.data == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat("tensor '%s' has no memory", t.name));
  }
  const size_t bytes = t.NumBytes();
  if (offset > bytes || size > bytes - offset) {
    return absl::OutOfRangeError(absl::StrFormat(
        "range [%d, %d) is outside tensor '%s' of %d bytes", offset, offset + size, t.name, bytes));
  }
  const auto base = reinterpret_cast<uintptr_t>(t.buffer->base());
  const auto start = reinterpret_cast<uintptr_t>(t.data);
  if (start < base || start - base > t.buffer->size() || bytes > t.buffer->size() - (start - base)) {
    return absl::OutOfRangeError(
        absl::StrFormat("tensor '%s' lies outside its buffer", t.name));
  }
  return absl::OkStatus();
}

absl::Status CheckTensorRange2D(const Tensor& t, const StridedRange& r) {
  absl::StatusOr<size_t> span = TensorSpan(r);
  if (!span.ok()) {
    return absl::Status(span.status().code(),
                        absl::StrFormat("tensor '%s': %s", t.name, span.status().message()));
  }
  if (absl::Status s = HostSpan(r).status(); !s.ok()) {
    return absl::Status(s.code(), absl::StrFormat("tensor '%s': %s", t.name, s.message()));
  }
  const size_t bytes = t.NumBytes();
  if (t.data != nullptr && (r.offset > bytes || *span > bytes - r.offset)) {
    return absl::OutOfRangeError(absl::StrFormat(
        "%d rows of %d bytes at offset %d, %d bytes apart, end at byte %d, past the %d bytes of "
        "tensor '%s'",
        r.n_rows, r.row_size, r.offset, r.stride, r.offset > bytes ? r.offset : r.offset + *span,
        bytes, t.name));
  }
  return CheckTensorRange(t, r.offset, *span);
}

absl::Status HostSetTensor2D(Tensor* t, const void* data, const StridedRange& r) {
  if (absl::Status s = CheckTensorRange2D(*t, r); !s.ok()) return s;
  CopyRows(static_cast<uint8_t*>(t->data) + r.offset, r.stride, data, r.HostStride(), r.row_size,
           r.n_rows);
  return absl::OkStatus();
}

absl::Status HostGetTensor2D(const Tensor* t, void* data, const StridedRange& r) {
  if (absl::Status s = CheckTensorRange2D(*t, r); !s.ok()) return s;
  CopyRows(data, r.HostStride(), static_cast<const uint8_t*>(t->data) + r.offset, r.stride,
           r.row_size, r.n_rows);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LoadStats>> SetTensorLoads(Buffer* buffer, const WeightSource& source,
                                                      absl::Span<const TensorLoad> loads) {
  LoadStats stats{.buffer = buffer};
  for (const TensorLoad& l : loads) {
    if (absl::Status s = CheckTensorLoad(source, l); !s.ok()) return s;
    const uint8_t* data = source.mapping.data() + l.file_offset;
    if (absl::Status s = buffer->SetTensor2D(l.tensor, data, l.rows); !s.ok()) return s;
    const uint64_t bytes = uint64_t{l.rows.n_rows} * l.rows.row_size;
    stats.bytes += bytes;
    if (source.on_placed) source.on_placed(bytes);
  }
  return std::vector<LoadStats>{stats};
}

absl::Status PlaceTensor(Buffer* buffer, Tensor* t, size_t offset) {
  const size_t align = buffer->type()->alignment();
  const size_t bytes = buffer->type()->AllocSize(*t);
  if (offset % align != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset %d of '%s' is not %d-aligned", offset, t->name, align));
  }
  if (offset > buffer->size() || bytes > buffer->size() - offset) {
    return absl::OutOfRangeError(absl::StrFormat("'%s' (%d bytes at %d) does not fit buffer of %d",
                                                 t->name, bytes, offset, buffer->size()));
  }
  t->buffer = buffer;
  t->data = static_cast<uint8_t*>(buffer->base()) + offset;
  return buffer->InitTensor(t);
}

absl::Status PlaceView(Tensor* view) {
  Tensor* base = view->view_src;
  if (base == nullptr || base->data == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("view '%s' has no placed base tensor", view->name));
  }
  view->buffer = base->buffer;
  view->data = static_cast<uint8_t*>(base->data) + view->view_offs;
  return view->buffer->InitTensor(view);
}

absl::Status Stream::SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) {
  if (t->buffer == nullptr) return CheckTensorRange(*t, offset, size);
  return t->buffer->SetTensor(t, data, offset, size);
}

absl::Status Stream::GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) {
  if (t->buffer == nullptr) return CheckTensorRange(*t, offset, size);
  return t->buffer->GetTensor(t, data, offset, size);
}

}  // namespace tg
