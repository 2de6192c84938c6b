#include "server/session_buffer.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace tg::server {

SessionBuffer::SessionBuffer(std::unique_ptr<Buffer> buffer, int device_index, uint64_t size,
                             std::function<void(uint64_t)> on_destroy,
                             std::shared_ptr<const CommandProgress> progress,
                             std::shared_ptr<SessionBufferRecycler> recycler, bool recycled)
    : buffer_(std::move(buffer)),
      device_index_(device_index),
      size_(size),
      on_destroy_(std::move(on_destroy)),
      progress_(std::move(progress)),
      recycler_(std::move(recycler)) {
  if (size_ > 0) unwritten_[0] = size_;
  // A fresh buffer is about to be filled (weights) or zeroed (ClearUnwritten) whole.
  if (!recycled) prefault_ = std::make_unique<BackgroundPrefault>(HostPointer(0), size_);
}

SessionBuffer::~SessionBuffer() {
  prefault_.reset();  // before the memory goes.
  if (recycler_ != nullptr) {
    recycler_->Keep(std::move(buffer_), size_);
  } else {
    buffer_.reset();
  }
  if (on_destroy_) on_destroy_(size_);
}

absl::Status SessionBuffer::CheckRange(uint64_t offset, uint64_t size) const {
  if (offset > size_ || size > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "range of %d bytes at offset %d lies outside the buffer of %d bytes", size, offset, size_));
  }
  return absl::OkStatus();
}

uint8_t* SessionBuffer::HostPointer(uint64_t offset) const {
  if (!buffer_->type()->is_host() || buffer_->base() == nullptr) return nullptr;
  return static_cast<uint8_t*>(buffer_->base()) + offset;
}

SessionBuffer::Fill SessionBuffer::BeginFill(uint64_t offset, uint64_t size) {
  std::vector<std::pair<uint64_t, uint64_t>> taken;
  if (size == 0) return Fill(this, std::move(taken));
  const uint64_t end = offset + size;
  absl::MutexLock lock(&mu_);
  // Intervals overlapping [offset, end): the first may start before it, the last end after.
  auto it = unwritten_.upper_bound(offset);
  if (it != unwritten_.begin() && std::prev(it)->second > offset) --it;
  while (it != unwritten_.end() && it->first < end) {
    const uint64_t start = it->first, stop = it->second;
    it = unwritten_.erase(it);
    if (start < offset) unwritten_[start] = offset;
    if (stop > end) unwritten_[end] = stop;
    taken.emplace_back(std::max(start, offset), std::min(stop, end));
  }
  if (!taken.empty()) ++fills_;
  return Fill(this, std::move(taken));
}

void SessionBuffer::EndFill(const std::vector<std::pair<uint64_t, uint64_t>>& taken,
                            bool done) const {
  if (taken.empty()) return;
  absl::MutexLock lock(&mu_);
  // Nothing else adds to the set, so the pieces cannot overlap what is there.
  if (!done) unwritten_.insert(taken.begin(), taken.end());
  --fills_;
}

SessionBuffer::Fill::Fill(Fill&& other) noexcept
    : buffer_(std::exchange(other.buffer_, nullptr)),
      taken_(std::move(other.taken_)),
      done_(other.done_) {}

SessionBuffer::Fill::~Fill() {
  if (buffer_ != nullptr) buffer_->EndFill(taken_, done_);
}

absl::Status SessionBuffer::ClearUnwritten() const {
  absl::MutexLock lock(&mu_);
  for (;;) {
    while (!unwritten_.empty()) {
      const auto [start, end] = *unwritten_.begin();
      TG_RETURN_IF_ERROR(SetBytes(start, 0, end - start));
      unwritten_.erase(unwritten_.begin());
    }
    if (fills_ == 0) return absl::OkStatus();
    // The set is empty, so no new Fill takes bytes; the ones in flight end or give theirs back.
    mu_.Await(absl::Condition(this, &SessionBuffer::NoFillsInFlight));
  }
}

Tensor SessionBuffer::Window(uint64_t offset, uint64_t size) const {
  // Byte-addressed window for non-host memory: an f32 "tensor" of one element per dim-0 and
  // size-3 rows of stride 1 spans exactly `size` bytes (f16 likewise for 2..3 bytes).
  Tensor t;
  t.buffer = buffer_.get();
  t.data = static_cast<uint8_t*>(buffer_->base()) + offset;
  if (size >= 4) {
    t.type = DType::kF32;
    t.ne[1] = static_cast<int64_t>(size - 3);
    t.nb[0] = 4;
  } else {
    t.type = DType::kF16;
    t.ne[1] = static_cast<int64_t>(size >= 1 ? size - 1 : 1);
    t.nb[0] = 2;
  }
  t.nb[1] = t.nb[2] = t.nb[3] = 1;
  return t;
}

absl::Status SessionBuffer::Write(uint64_t offset, const void* data, uint64_t size) {
  TG_RETURN_IF_ERROR(CheckRange(offset, size));
  if (size == 0) return absl::OkStatus();
  if (HostPointer(offset) == nullptr && size < 2) {
    return absl::UnimplementedError("1-byte writes into device memory");
  }
  Fill fill = BeginFill(offset, size);
  if (uint8_t* p = HostPointer(offset); p != nullptr) {
    std::memcpy(p, data, size);
  } else {
    Tensor w = Window(offset, size);
    TG_RETURN_IF_ERROR(buffer_->SetTensor(&w, data, 0, size));
  }
  fill.Done();
  return absl::OkStatus();
}

absl::Status SessionBuffer::Read(uint64_t offset, void* data, uint64_t size) const {
  TG_RETURN_IF_ERROR(CheckRange(offset, size));
  if (size == 0) return absl::OkStatus();
  TG_RETURN_IF_ERROR(ClearUnwritten());
  if (const uint8_t* p = HostPointer(offset); p != nullptr) {
    std::memcpy(data, p, size);
    return absl::OkStatus();
  }
  if (size < 2) return absl::UnimplementedError("1-byte reads from device memory");
  Tensor w = Window(offset, size);
  return buffer_->GetTensor(&w, data, 0, size);
}

absl::Status SessionBuffer::CheckRows(const StridedRange& r) const {
  TG_RETURN_IF_ERROR(HostSpan(r).status());
  TG_ASSIGN_OR_RETURN(const size_t span, TensorSpan(r));
  if (r.offset > size_ || span > size_ - r.offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d rows of %d bytes at offset %d, %d bytes apart, end past the buffer of %d bytes",
        r.n_rows, r.row_size, r.offset, r.stride, size_));
  }
  return absl::OkStatus();
}

absl::Status SessionBuffer::WriteRows(const StridedRange& r, const void* data) {
  TG_RETURN_IF_ERROR(CheckRows(r));
  if (r.n_rows == 0 || r.row_size == 0) return absl::OkStatus();
  if (r.TensorContiguous() && r.HostStride() == r.row_size) {
    return Write(r.offset, data, r.row_size * r.n_rows);
  }
  const size_t span = *TensorSpan(r);
  // Rows back to back are one range written; rows apart leave gaps no write reaches, so the
  // unwritten bytes are zeroed first (once per buffer) instead of tracking every row.
  std::optional<Fill> fill;
  if (r.TensorContiguous()) {
    fill.emplace(BeginFill(r.offset, span));
  } else {
    TG_RETURN_IF_ERROR(ClearUnwritten());
  }
  if (uint8_t* p = HostPointer(r.offset); p != nullptr) {
    CopyRows(p, r.stride, data, r.HostStride(), r.row_size, r.n_rows);
  } else {
    // Device memory: the backend's 2D copy into a window over the rows' span (>= 2 bytes:
    // two rows that do not overlap).
    Tensor w = Window(r.offset, span);
    StridedRange rows = r;
    rows.offset = 0;
    TG_RETURN_IF_ERROR(buffer_->SetTensor2D(&w, data, rows));
  }
  if (fill.has_value()) fill->Done();
  return absl::OkStatus();
}

absl::Status SessionBuffer::ReadRows(const StridedRange& r, void* data) const {
  TG_RETURN_IF_ERROR(CheckRows(r));
  if (r.n_rows == 0 || r.row_size == 0) return absl::OkStatus();
  TG_RETURN_IF_ERROR(ClearUnwritten());
  if (const uint8_t* p = HostPointer(r.offset); p != nullptr) {
    CopyRows(data, r.HostStride(), p, r.stride, r.row_size, r.n_rows);
    return absl::OkStatus();
  }
  if (r.TensorContiguous() && r.HostStride() == r.row_size) {
    return Read(r.offset, data, r.row_size * r.n_rows);
  }
  Tensor w = Window(r.offset, *TensorSpan(r));
  StridedRange rows = r;
  rows.offset = 0;
  return buffer_->GetTensor2D(&w, data, rows);
}

absl::Status SessionBuffer::Memset(uint64_t offset, uint8_t value, uint64_t size) {
  TG_RETURN_IF_ERROR(CheckRange(offset, size));
  Fill fill = BeginFill(offset, size);
  TG_RETURN_IF_ERROR(SetBytes(offset, value, size));
  fill.Done();
  return absl::OkStatus();
}

absl::Status SessionBuffer::SetBytes(uint64_t offset, uint8_t value, uint64_t size) const {
  TG_RETURN_IF_ERROR(CheckRange(offset, size));
  if (size == 0) return absl::OkStatus();
  if (uint8_t* p = HostPointer(offset); p != nullptr) {
    std::memset(p, value, size);
    return absl::OkStatus();
  }
  if (size < 2) return absl::UnimplementedError("1-byte memset of device memory");
  Tensor w = Window(offset, size);
  return buffer_->MemsetTensor(&w, value, 0, size);
}

absl::Status SessionBuffer::Copy(const SessionBuffer& src, uint64_t src_offset, SessionBuffer& dst,
                                 uint64_t dst_offset, uint64_t size) {
  TG_RETURN_IF_ERROR(src.CheckRange(src_offset, size));
  TG_RETURN_IF_ERROR(dst.CheckRange(dst_offset, size));
  if (size == 0) return absl::OkStatus();
  TG_RETURN_IF_ERROR(src.ClearUnwritten());
  const uint8_t* s = src.HostPointer(src_offset);
  uint8_t* d = dst.HostPointer(dst_offset);
  if (s != nullptr && d != nullptr) {
    Fill fill = dst.BeginFill(dst_offset, size);
    std::memmove(d, s, size);  // the same buffer may overlap.
    fill.Done();
    return absl::OkStatus();
  }
  if (&src != &dst && size >= 2) {
    Fill fill = dst.BeginFill(dst_offset, size);
    Tensor ws = src.Window(src_offset, size);
    Tensor wd = dst.Window(dst_offset, size);
    if (dst.buffer_->CopyFrom(&ws, &wd).ok()) {
      fill.Done();
      return absl::OkStatus();
    }
  }  // a failed CopyFrom gives its range back before the staged copy reads.
  // Through host memory, in bounded pieces.
  constexpr uint64_t kStage = uint64_t{4} << 20;
  std::vector<uint8_t> stage(std::min(size, kStage));
  if (&src == &dst && dst_offset > src_offset && dst_offset - src_offset < size) {
    // Overlapping move forward inside one buffer: copy from the end.
    uint64_t left = size;
    while (left > 0) {
      const uint64_t n = std::min(left, kStage);
      left -= n;
      TG_RETURN_IF_ERROR(src.Read(src_offset + left, stage.data(), n));
      TG_RETURN_IF_ERROR(dst.Write(dst_offset + left, stage.data(), n));
    }
    return absl::OkStatus();
  }
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(size - done, kStage);
    TG_RETURN_IF_ERROR(src.Read(src_offset + done, stage.data(), n));
    TG_RETURN_IF_ERROR(dst.Write(dst_offset + done, stage.data(), n));
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace tg::server
