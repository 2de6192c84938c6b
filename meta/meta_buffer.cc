#include "meta/meta_buffer.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/load_weights.h"
#include "core/lost_endpoint.h"
#include "core/status_macros.h"
#include "meta/meta_device.h"
#include "meta/shadow_io.h"
#include "meta/slice_copy.h"

namespace tg::meta {
namespace {

// Meta buffers get addresses from a range no host code ever dereferences (is_host() is
// false); the values only make a device's tensor addresses unique and range checks
// meaningful.
constexpr uintptr_t kFakeAddressStart = uintptr_t{1} << 46;
constexpr uintptr_t kFakeAddressAlign = uintptr_t{1} << 16;

// Per-device arena chunks for resident shadows: large enough to hold many weights in one
// device allocation, small enough that the unused tail of the last chunk stays modest.
constexpr size_t kMinArenaChunk = size_t{1} << 20;
constexpr size_t kMaxArenaChunk = size_t{256} << 20;

size_t AlignUp(size_t n, size_t align) { return (n + align - 1) / align * align; }

// The loads that put the whole tensor t, at file_offset of the file, into its shadows: the
// whole range for each copy (a PARTIAL tensor: its first device's; the others are zeroed
// here), each device's pieces of an AXIS split as rows of the file.
absl::Status AppendShadowLoads(const Tensor& t, const ShadowSet& set, uint64_t file_offset,
                               std::vector<TensorLoad>* out) {
  const size_t total = t.NumBytes();
  bool first = true;
  for (size_t d = 0; d < set.shadows.size(); ++d) {
    Tensor* s = set.shadows[d];
    if (s == nullptr) continue;
    if (set.state.is_axis()) {
      for (const SliceRun& run : SliceRuns(t, set.state, static_cast<int>(d))) {
        const bool one_run =
            run.rows == 1 || (run.full_stride == run.bytes && run.slice_stride == run.bytes);
        StridedRange r;
        r.offset = run.slice_offset;
        r.row_size = one_run ? run.bytes * run.rows : run.bytes;
        r.n_rows = one_run ? 1 : run.rows;
        r.stride = one_run ? r.row_size : run.slice_stride;
        r.host_stride = one_run ? 0 : run.full_stride;
        out->push_back({s, file_offset + run.full_offset, r});
      }
    } else if (set.state.is_mirrored() || first) {
      out->push_back(WholeTensorLoad(s, file_offset, total));
    } else {
      TG_RETURN_IF_ERROR(s->buffer->MemsetTensor(s, 0, 0, total));
    }
    first = false;
  }
  return absl::OkStatus();
}

}  // namespace

MetaBufferType::MetaBufferType(MetaDevice* device)
    : device_(device), next_address_(kFakeAddressStart) {
  name_ = std::string(device->name());
  for (Device* d : device->devices()) {
    BufferType* bt = d->default_buffer_type();
    alignment_ = std::max(alignment_, bt->alignment());
    max_size_ = std::min(max_size_, bt->max_size());
  }
}

Device* MetaBufferType::device() const { return device_; }

size_t MetaBufferType::AllocSize(const Tensor& t) const {
  size_t size = t.NumBytes();
  for (Device* d : device_->devices()) {
    size = std::max(size, d->default_buffer_type()->AllocSize(t));
  }
  return size;
}

absl::StatusOr<std::unique_ptr<Buffer>> MetaBufferType::Allocate(size_t size) {
  const uintptr_t span = AlignUp(size, kFakeAddressAlign) + kFakeAddressAlign;
  const uintptr_t base = next_address_.fetch_add(span);
  return std::unique_ptr<Buffer>(new MetaBuffer(this, base, size));
}

MetaBuffer::MetaBuffer(MetaBufferType* type, uintptr_t base, size_t size)
    : BasicBuffer(type, reinterpret_cast<void*>(base), size), device_(type->meta_device()) {
  arenas_.resize(device_->n_devices());
}

absl::Status MetaBuffer::InitTensor(Tensor* t) {
  // Graph tensors and views get nothing here: the allocator places every graph tensor each
  // decode step, so this stays lock-free. (Data a graph tensor's address still has from a
  // tensor that was never computed is overwritten by the next SetTensor or Compute.)
  if (t->view_src != nullptr || holds_graph_tensors()) return absl::OkStatus();
  MutexLock lock(&mu_);
  return CreateResidentShadows(t);
}

absl::Status MetaBuffer::CreateResidentShadows(Tensor* t) {
  meta_type()->BumpResidentGeneration();
  TG_ASSIGN_OR_RETURN(SplitState state, device_->DecideSplit(*t));
  ShadowSet set;
  set.state = state;
  set.shadows.assign(device_->n_devices(), nullptr);
  for (int d = 0; d < device_->n_devices(); ++d) {
    if (state.Empty(d)) continue;
    Tensor* s = shadow_ctx_.NewBlank();
    s->type = t->type;
    ShadowShape(*t, state, d, s->ne);
    SetContiguousStrides(s);
    s->flags = t->flags;
    s->SetName(absl::StrCat(t->name, "#", d));
    TG_RETURN_IF_ERROR(PlaceInArena(d, s));
    set.shadows[d] = s;
  }
  resident_[t] = std::move(set);
  return absl::OkStatus();
}

absl::Status MetaBuffer::PlaceInArena(int d, Tensor* shadow) {
  BufferType* bt = device_->device(d)->default_buffer_type();
  const size_t bytes = std::max<size_t>(bt->AllocSize(*shadow), 1);
  Arena& arena = arenas_[d];
  size_t offset = AlignUp(arena.used, bt->alignment());
  if (arena.chunks.empty() || offset + bytes > arena.chunks.back()->size()) {
    const size_t share = size() / device_->n_devices();
    const size_t chunk = std::max(bytes, std::clamp(share, kMinArenaChunk, kMaxArenaChunk));
    absl::StatusOr<std::unique_ptr<Buffer>> buffer = bt->Allocate(chunk);
    if (!buffer.ok()) {
      return KeepIdentity(
          buffer.status(),
          absl::Status(buffer.status().code(),
                       absl::StrFormat("%s: placing '%s' on %s: %s", type()->name(), shadow->name,
                                       device_->device(d)->name(), buffer.status().message())));
    }
    (*buffer)->set_usage(usage());
    arena.chunks.push_back(std::move(*buffer));
    offset = 0;
  }
  arena.used = offset + bytes;
  return PlaceTensor(arena.chunks.back().get(), shadow, offset);
}

std::optional<ShadowSet> MetaBuffer::Shadows(const Tensor* t) const {
  MutexLock lock(&mu_);
  if (auto it = resident_.find(t); it != resident_.end()) return it->second;
  return GraphShadows(t);
}

std::vector<TensorPart> MetaBuffer::Parts(const Tensor& t) const {
  const std::optional<ShadowSet> set = Shadows(&t);
  if (!set.has_value()) return Buffer::Parts(t);
  std::vector<TensorPart> parts;
  for (const Tensor* s : set->shadows) {
    if (s != nullptr && s->buffer != nullptr) parts.push_back({s->buffer, s->NumBytes()});
  }
  return parts;
}

std::optional<ShadowSet> MetaBuffer::GraphShadows(const Tensor* t) const {
  auto it = graph_.find(t);
  if (it == graph_.end() || !it->second.valid()) return std::nullopt;
  return it->second.set;
}

void MetaBuffer::ResetGraphTensors() {
  MutexLock lock(&mu_);
  graph_.clear();
}

void MetaBuffer::RegisterGraphTensor(const Tensor* t, ShadowSet set,
                                     std::shared_ptr<const PlanMemory> memory, uint64_t epoch) {
  MutexLock lock(&mu_);
  graph_[t] = GraphTensor{std::move(set), std::move(memory), epoch};
}

std::optional<std::vector<uint8_t>> MetaBuffer::TakePending(const Tensor* t) {
  MutexLock lock(&mu_);
  auto it = pending_.find(t);
  if (it == pending_.end()) return std::nullopt;
  std::vector<uint8_t> bytes = std::move(it->second);
  pending_.erase(it);
  return bytes;
}

absl::Status MetaBuffer::SetPending(const Tensor* t, const void* data, size_t offset, size_t size,
                                    std::optional<uint8_t> fill) {
  MutexLock lock(&mu_);
  std::vector<uint8_t>& bytes = pending_[t];
  bytes.resize(t->NumBytes());
  if (fill.has_value()) {
    std::memset(bytes.data() + offset, *fill, size);
  } else {
    std::memcpy(bytes.data() + offset, data, size);
  }
  return absl::OkStatus();
}

absl::Status MetaBuffer::RowsInPlace(const Tensor& t, const ShadowSet& set, size_t offset,
                                     size_t size, const uint8_t* in, uint8_t* out) {
  const size_t row = t.nb[1];
  const bool whole_rows = offset % row == 0 && size % row == 0 && t.ne[2] == 1 && t.ne[3] == 1;
  if (!set.state.is_axis() || set.state.axis() != 0 || set.state.segmented() || !whole_rows ||
      !t.IsContiguous()) {
    return absl::UnimplementedError("not whole rows of a tensor split along dimension 0");
  }
  const size_t n_rows = size / row, first = offset / row;
  const bool write = in != nullptr;
  std::vector<uint8_t> slice;
  for (int d = 0; d < set.state.n_devices(); ++d) {
    Tensor* s = set.shadows[d];
    if (s == nullptr || set.state.Empty(d)) continue;
    const size_t s_row = s->nb[1];
    const size_t column = RowBytes(t.type, set.state.range(d).begin);
    slice.resize(n_rows * s_row);
    if (!write) TG_RETURN_IF_ERROR(s->buffer->GetTensor(s, slice.data(), first * s_row, slice.size()));
    for (size_t r = 0; r < n_rows; ++r) {
      if (write) {
        std::memcpy(slice.data() + r * s_row, in + r * row + column, s_row);
      } else {
        std::memcpy(out + r * row + column, slice.data() + r * s_row, s_row);
      }
    }
    if (write) TG_RETURN_IF_ERROR(s->buffer->SetTensor(s, slice.data(), first * s_row, slice.size()));
  }
  return absl::OkStatus();
}

absl::Status MetaBuffer::WriteRange(Tensor* t, const ShadowSet& set, const void* data,
                                    size_t offset, size_t size) {
  if (offset == 0 && size == t->NumBytes()) {
    return ScatterToShadows(*t, set, static_cast<const uint8_t*>(data));
  }
  // UNIMPLEMENTED: not whole rows of a dimension-0 split; then read, modify, write it all.
  if (absl::Status s =
          RowsInPlace(*t, set, offset, size, static_cast<const uint8_t*>(data), nullptr);
      !absl::IsUnimplemented(s)) {
    return s;
  }
  std::vector<uint8_t> full(t->NumBytes());
  if (offset != 0 || size != full.size()) {
    TG_RETURN_IF_ERROR(GatherFromShadows(*t, set, full.data()));
  }
  std::memcpy(full.data() + offset, data, size);
  return ScatterToShadows(*t, set, full.data());
}

absl::Status MetaBuffer::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  if (size == 0) return absl::OkStatus();  // `data` may be null (memcpy's may not).
  if (t->view_src != nullptr) return SetTensor(t->view_src, data, t->view_offs + offset, size);
  std::optional<ShadowSet> set;
  {
    MutexLock lock(&mu_);
    if (auto it = resident_.find(t); it != resident_.end()) set = it->second;
  }
  if (!set.has_value()) return SetPending(t, data, offset, size, std::nullopt);
  if (set->state.is_mirrored()) {
    for (Tensor* s : set->shadows) TG_RETURN_IF_ERROR(s->buffer->SetTensor(s, data, offset, size));
    return absl::OkStatus();
  }
  return WriteRange(t, *set, data, offset, size);
}

absl::Status MetaBuffer::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  if (size == 0) return absl::OkStatus();
  if (t->view_src != nullptr) return GetTensor(t->view_src, data, t->view_offs + offset, size);
  std::optional<ShadowSet> set;
  {
    MutexLock lock(&mu_);
    if (auto it = pending_.find(t); it != pending_.end()) {
      std::memcpy(data, it->second.data() + offset, size);
      return absl::OkStatus();
    }
    if (auto it = resident_.find(t); it != resident_.end()) {
      set = it->second;
    } else {
      set = GraphShadows(t);
    }
  }
  if (!set.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        type()->name(), ": ", DescribeTensor(*t),
        " holds no data (not written, and not an output of the last graph its stream computed)"));
  }
  if (set->state.is_mirrored()) {
    for (Tensor* s : set->shadows) {
      if (s != nullptr) return s->buffer->GetTensor(s, data, offset, size);
    }
  }
  if (offset == 0 && size == t->NumBytes()) {
    return GatherFromShadows(*t, *set, static_cast<uint8_t*>(data));
  }
  if (absl::Status s = RowsInPlace(*t, *set, offset, size, nullptr, static_cast<uint8_t*>(data));
      !absl::IsUnimplemented(s)) {
    return s;
  }
  std::vector<uint8_t> full(t->NumBytes());
  TG_RETURN_IF_ERROR(GatherFromShadows(*t, *set, full.data()));
  std::memcpy(data, full.data() + offset, size);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LoadStats>> MetaBuffer::LoadTensors(const WeightSource& source,
                                                               absl::Span<const TensorLoad> loads) {
  std::vector<TensorLoad> device_loads, others;
  for (const TensorLoad& l : loads) {
    TG_RETURN_IF_ERROR(CheckTensorLoad(source, l));
    const Tensor& t = *l.tensor;
    std::optional<ShadowSet> set;
    {
      MutexLock lock(&mu_);
      if (auto it = resident_.find(&t); it != resident_.end()) set = it->second;
    }
    const bool whole = l.rows.offset == 0 && l.rows.n_rows == 1 && l.rows.row_size == t.NumBytes();
    if (!set.has_value() || !whole || !t.IsContiguous()) {
      others.push_back(l);
      continue;
    }
    TG_RETURN_IF_ERROR(AppendShadowLoads(t, *set, l.file_offset, &device_loads));
  }
  TG_ASSIGN_OR_RETURN(std::vector<LoadStats> stats, LoadWeights(source, device_loads));
  if (!others.empty()) {
    TG_ASSIGN_OR_RETURN(std::vector<LoadStats> written, SetTensorLoads(this, source, others));
    for (LoadStats& w : written) stats.push_back(std::move(w));
  }
  return stats;
}

absl::Status MetaBuffer::MemsetTensor(Tensor* t, uint8_t value, size_t offset, size_t size) {
  TG_RETURN_IF_ERROR(CheckTensorRange(*t, offset, size));
  if (size == 0) return absl::OkStatus();  // the fill below would be an empty (null) vector.
  if (t->view_src != nullptr) {
    return MemsetTensor(t->view_src, value, t->view_offs + offset, size);
  }
  std::optional<ShadowSet> set;
  {
    MutexLock lock(&mu_);
    if (auto it = resident_.find(t); it != resident_.end()) set = it->second;
  }
  if (!set.has_value()) return SetPending(t, nullptr, offset, size, value);
  if (offset == 0 && size == t->NumBytes()) return MemsetShadows(*set, value);
  if (set->state.is_mirrored()) {
    for (Tensor* s : set->shadows) {
      TG_RETURN_IF_ERROR(s->buffer->MemsetTensor(s, value, offset, size));
    }
    return absl::OkStatus();
  }
  std::vector<uint8_t> fill(size, value);
  return WriteRange(t, *set, fill.data(), offset, size);
}

absl::Status MetaBuffer::Clear(uint8_t value) {
  MutexLock lock(&mu_);
  for (Arena& arena : arenas_) {
    for (auto& chunk : arena.chunks) TG_RETURN_IF_ERROR(chunk->Clear(value));
  }
  for (auto& [t, g] : graph_) {
    if (g.valid()) TG_RETURN_IF_ERROR(MemsetShadows(g.set, value));
  }
  for (auto& [t, bytes] : pending_) std::fill(bytes.begin(), bytes.end(), value);
  return absl::OkStatus();
}

}  // namespace tg::meta
