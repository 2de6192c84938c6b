// gguf_fuzz_seeds: writes the fuzzing seed corpus, a handful of small valid GGUF files that
// between them use every metadata type, nested arrays, every tensor type and a non-default
// alignment; plus, given the real stories260K model, its metadata with a tiny tensor (and,
// with --copy-model, the model itself). Seeds are made at build/test time, not kept in git.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace {

constexpr int kExitUsage = 2;

tg::GgufValue Scalar(tg::GgufType type, decltype(tg::GgufValue::scalar) scalar) {
  tg::GgufValue v;
  v.type = type;
  v.scalar = std::move(scalar);
  return v;
}

tg::GgufValue ArrayOf(tg::GgufType elem_type, std::vector<tg::GgufValue> elems) {
  tg::GgufValue v;
  v.type = tg::GgufType::kArray;
  v.elem_type = elem_type;
  v.array = std::move(elems);
  return v;
}

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 37 + 11);
  return b;
}

tg::GgufWriter Scalars() {
  using tg::GgufType;
  tg::GgufWriter w;
  w.SetValue("u8", Scalar(GgufType::kUint8, uint64_t{200}));
  w.SetValue("i8", Scalar(GgufType::kInt8, int64_t{-3}));
  w.SetValue("u16", Scalar(GgufType::kUint16, uint64_t{60000}));
  w.SetValue("i16", Scalar(GgufType::kInt16, int64_t{-300}));
  w.SetU32("u32", 7);
  w.SetI32("i32", -7);
  w.SetU64("u64", uint64_t{1} << 40);
  w.SetValue("i64", Scalar(GgufType::kInt64, int64_t{-1} << 40));
  w.SetF32("f32", 1e-5f);
  w.SetValue("f64", Scalar(GgufType::kFloat64, 3.5));
  w.SetBool("bool", true);
  w.SetString("general.architecture", "llama");
  return w;
}

tg::GgufWriter Arrays() {
  using tg::GgufType;
  tg::GgufWriter w;
  w.SetStringArray("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>", "a"});
  w.SetF32Array("tokenizer.ggml.scores", std::vector<float>{0, 0, 0, -1});
  w.SetI32Array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1});
  w.SetValue("arr_u8", ArrayOf(GgufType::kUint8, {Scalar(GgufType::kUint8, uint64_t{1})}));
  w.SetValue("arr_bool", ArrayOf(GgufType::kBool, {Scalar(GgufType::kBool, false)}));
  w.SetValue("nested", ArrayOf(GgufType::kArray,
                               {ArrayOf(GgufType::kInt16, {Scalar(GgufType::kInt16, int64_t{-2})}),
                                ArrayOf(GgufType::kString, {})}));
  return w;
}

tg::GgufWriter Tensors() {
  tg::GgufWriter w;
  w.SetString("general.architecture", "llama");
  for (tg::DType type : tg::kAllDTypes) {
    const std::vector<int64_t> ne = {tg::BlockSize(type), 2};
    (void)w.AddTensor(absl::StrCat("t.", tg::DTypeName(type)), type, ne,
                      Pattern(tg::RowBytes(type, ne[0]) * 2));
  }
  return w;
}

tg::GgufWriter Aligned64() {
  tg::GgufWriter w(64);
  (void)w.AddTensor("a", tg::DType::kF32, std::vector<int64_t>{3}, Pattern(12));
  (void)w.AddTensor("b", tg::DType::kF16, std::vector<int64_t>{5, 1, 2}, Pattern(20));
  return w;
}

// The real model's metadata (a 512-token vocabulary) with one tiny tensor.
bool LlamaMetadata(const std::string& model, tg::GgufWriter* w) {
  absl::StatusOr<std::unique_ptr<tg::GgufFile>> f = tg::GgufFile::Open(model);
  if (!f.ok()) return false;
  for (const auto& [key, value] : (*f)->metadata()) w->SetValue(key, value);
  (void)w->AddTensor("token_embd.weight", tg::DType::kF32, std::vector<int64_t>{8, 2}, Pattern(64));
  return true;
}

bool Write(const tg::GgufWriter& w, const std::filesystem::path& path) {
  if (absl::Status s = w.WriteFile(path.string()); !s.ok()) {
    std::fprintf(stderr, "gguf_fuzz_seeds: %s\n", std::string(s.message()).c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gguf_fuzz_seeds OUT_DIR [stories260K.gguf [--copy-model]]\n");
    return kExitUsage;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  bool ok = Write(tg::GgufWriter(), dir / "empty.gguf") && Write(Scalars(), dir / "scalars.gguf") &&
            Write(Arrays(), dir / "arrays.gguf") && Write(Tensors(), dir / "tensors.gguf") &&
            Write(Aligned64(), dir / "aligned64.gguf");
  if (ok && argc >= 3) {
    tg::GgufWriter llama;
    if (!LlamaMetadata(argv[2], &llama)) {
      std::printf("gguf_fuzz_seeds: %s not readable, no llama seed\n", argv[2]);
    } else {
      ok = Write(llama, dir / "llama_meta.gguf");
      if (ok && argc >= 4 && std::string(argv[3]) == "--copy-model") {
        std::filesystem::remove(dir / "model.gguf", ec);  // a copy may be read-only.
        ok = std::filesystem::copy_file(argv[2], dir / "model.gguf", ec);
      }
    }
  }
  if (ok) std::printf("gguf_fuzz_seeds: corpus in %s\n", dir.c_str());
  return ok ? 0 : 1;
}
