// The model file rpc_session_fuzz serves from its --model-dir: a GGUF v3 file with two f32
// tensors written out byte by byte (so that the fuzzer needs no model code), and the identity
// and piece hashes a client would announce for it; rpc_session_fuzz_seeds puts them into the
// seeds so that fuzzing starts from uploads the server answers from the file.
#ifndef TENSORGRID_TESTS_FUZZ_FUZZ_MODEL_FILE_H_
#define TENSORGRID_TESTS_FUZZ_FUZZ_MODEL_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/content_hash.h"
#include "proto/model_identity.h"

namespace tg::fuzz {

struct FuzzModelFile {
  std::string bytes;
  uint64_t data_start = 0;
  std::vector<rpc::FileRange> tensors;  // 16 and 40 floats.

  rpc::ModelIdentity identity() const {
    return rpc::IdentityOf(
        {reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<size_t>(data_start)},
        bytes.size());
  }
  std::string HeaderSha256() const {
    const rpc::Sha256Digest d = identity().header;
    return std::string(d.begin(), d.end());
  }
  std::string PieceSha256(size_t i) const {
    const rpc::Sha256Digest d = rpc::Sha256(bytes.data() + tensors[i].offset, tensors[i].size);
    return std::string(d.begin(), d.end());
  }
};

inline FuzzModelFile MakeFuzzModelFile() {
  constexpr uint64_t kAlignment = 32;  // GGUF's default: no general.alignment key.
  FuzzModelFile f;
  std::string& b = f.bytes;
  auto u32 = [&b](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&b](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& s) {
    u64(s.size());
    b += s;
  };
  const uint64_t floats[2] = {16, 40};
  b += "GGUF";
  u32(3);  // version.
  u64(2);  // tensors.
  u64(1);  // metadata keys.
  str("general.architecture");
  u32(8);  // string.
  str("llama");
  uint64_t offset = 0;
  for (int i = 0; i < 2; ++i) {
    str(i == 0 ? "a.weight" : "b.weight");
    u32(1);  // dimensions.
    u64(floats[i]);
    u32(0);  // f32.
    u64(offset);
    offset += (floats[i] * 4 + kAlignment - 1) / kAlignment * kAlignment;
  }
  f.data_start = (b.size() + kAlignment - 1) / kAlignment * kAlignment;
  b.resize(f.data_start, '\0');
  for (int i = 0; i < 2; ++i) {
    f.tensors.push_back({b.size(), floats[i] * 4});
    for (uint64_t k = 0; k < floats[i] * 4; ++k) b.push_back(static_cast<char>(k * 13 + i));
    b.resize((b.size() + kAlignment - 1) / kAlignment * kAlignment, '\0');
  }
  return f;
}

}  // namespace tg::fuzz

#endif  // TENSORGRID_TESTS_FUZZ_FUZZ_MODEL_FILE_H_
