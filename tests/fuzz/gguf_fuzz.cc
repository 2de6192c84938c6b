// libFuzzer entry point for the GGUF parser: any byte string must parse to a valid GgufFile
// or fail with a status, and a file that parses must be safe to use through every accessor.
// Read with pread the way rpc-server's --model-dir reads (through a small window, keeping no
// metadata), the same bytes must end the same way, with the same tensor extents.
// Built as a libFuzzer binary (clang, TG_FUZZ=ON) or linked into gguf_fuzz_replay.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "gguf/gguf_file.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_tensor_extents.h"

namespace {

// Calls every typed getter on every key; the results only feed `sink`.
uint64_t TouchMetadata(const tg::GgufFile& f) {
  uint64_t sink = 0;
  for (const auto& [key, value] : f.metadata()) {
    if (f.Find(key) != &value) std::abort();  // the index must agree with the list.
    if (auto s = f.GetString(key); s.ok()) sink += s->size();
    if (auto u = f.GetU32(key); u.ok()) sink += *u;
    if (auto i = f.GetI64(key); i.ok()) sink += static_cast<uint64_t>(*i);
    if (auto x = f.GetF32(key); x.ok()) sink += *x > 0.0f ? 1 : 0;
    if (auto b = f.GetBool(key); b.ok()) sink += *b ? 1 : 0;
    if (auto a = f.GetStringArray(key); a.ok()) {
      for (const std::string& s : *a) sink += s.size();
    }
    if (auto a = f.GetF32Array(key); a.ok()) sink += a->size();
    if (auto a = f.GetI32Array(key); a.ok()) {
      for (int32_t v : *a) sink += static_cast<uint32_t>(v);
    }
  }
  return sink;
}

// Reads every byte of every tensor; out-of-bounds data would trip AddressSanitizer.
uint64_t TouchTensors(const tg::GgufFile& f) {
  uint64_t sum = 0;
  const uint8_t* end = f.bytes().data() + f.bytes().size();
  for (const tg::GgufTensorInfo& t : f.tensors()) {
    if (f.FindTensor(t.name) != &t) std::abort();
    if (t.n_dims < 0 || t.n_dims > 4) std::abort();
    // Inside the data section, not merely inside the buffer (which ASan alone would check).
    if (t.data < f.data_section() || t.nbytes > static_cast<size_t>(end - t.data)) std::abort();
    for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  }
  return sum;
}

// The same bytes read with pread from a memfd: the same status, the same extents.
void CompareWithPread(const uint8_t* data, size_t size,
                      const absl::StatusOr<std::unique_ptr<tg::GgufFile>>& mem) {
  static const int fd = memfd_create("gguf_fuzz", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 0) != 0) std::abort();
  if (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  tg::GgufPreadReader reader(fd, size, "<memory>", 7);
  absl::StatusOr<std::unique_ptr<tg::GgufFile>> pread =
      tg::GgufFile::Read(reader, "<memory>", {.keep_metadata = false});
  if (pread.status() != mem.status()) std::abort();
  if (!mem.ok()) return;
  const tg::GgufTensorExtents a = tg::TensorExtentsOf(**mem);
  const tg::GgufTensorExtents b = tg::TensorExtentsOf(**pread);
  if (a.data_start != b.data_start || a.tensors != b.tensors) std::abort();
  for (const tg::GgufTensorInfo& t : (*pread)->tensors()) {
    if (t.data != nullptr) std::abort();  // nothing to point into.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<tg::GgufFile>> f = tg::GgufFile::FromBytes({data, size});
  CompareWithPread(data, size, f);
  if (!f.ok()) return 0;
  const tg::GgufFile& g = **f;
  const uint8_t* end = g.bytes().data() + g.bytes().size();
  if (g.data_section() < g.bytes().data() || g.data_section() > end) std::abort();
  if (g.version() < 2 || g.version() > 3 || (g.alignment() & (g.alignment() - 1)) != 0) {
    std::abort();
  }
  volatile uint64_t sink = TouchMetadata(g) + TouchTensors(g);
  (void)sink;
  return 0;
}
