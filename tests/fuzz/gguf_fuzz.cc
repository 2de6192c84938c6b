// libFuzzer entry point for the GGUF parser: any byte string must parse to a valid GgufFile
// or fail with a status, and a file that parses must be safe to use through every accessor.
// Built as a libFuzzer binary (clang, TG_FUZZ=ON) or linked into gguf_fuzz_replay.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "models/gguf_file.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<tg::GgufFile>> f = tg::GgufFile::FromBytes({data, size});
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
