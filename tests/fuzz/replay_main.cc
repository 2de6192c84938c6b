// *_fuzz_replay (gguf, rpc_session): runs the fuzz entry point over files and directories without
// libFuzzer (gcc builds, CI). With --mutations=N it also replays N deterministic byte-level
// mutations of each input, a poor man's fuzzing that still exercises the error paths under the
// sanitizers.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

constexpr int kExitUsage = 2;
constexpr uint32_t kMutationSeed = 20240601;  // fixed: a failure must reproduce.
// Larger inputs (real models) are mostly tensor data, where byte flips test nothing.
constexpr size_t kMaxMutatedBytes = 64 * 1024;

bool ReadFile(const std::filesystem::path& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

// Runs one input: as is, then `mutations` copies with 1-8 random bytes overwritten and, one
// time in four, a random truncation, each in an exact-size buffer so that AddressSanitizer sees
// overruns. Inputs above kMaxMutatedBytes are only run as they are.
void RunInput(const std::vector<uint8_t>& input, int mutations, std::mt19937* rng) {
  LLVMFuzzerTestOneInput(input.data(), input.size());
  if (input.size() > kMaxMutatedBytes) return;
  for (int m = 0; m < mutations && !input.empty(); ++m) {
    std::vector<uint8_t> copy = input;
    const int flips = 1 + static_cast<int>((*rng)() % 8);
    for (int i = 0; i < flips; ++i) copy[(*rng)() % copy.size()] = static_cast<uint8_t>((*rng)());
    if ((*rng)() % 4 == 0) copy.resize((*rng)() % copy.size());
    std::vector<uint8_t> exact(copy.begin(), copy.end());
    LLVMFuzzerTestOneInput(exact.data(), exact.size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int mutations = 0;
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--mutations=", 12) == 0) {
      mutations = std::atoi(argv[i] + 12);
    } else {
      inputs.emplace_back(argv[i]);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s [--mutations=N] FILE_OR_DIR...\n", argv[0]);
    return kExitUsage;
  }
  std::vector<std::filesystem::path> files;
  for (const std::filesystem::path& p : inputs) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.push_back(p);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "%s: no input files\n", argv[0]);
    return 1;
  }
  std::sort(files.begin(), files.end());  // a stable order, so mutations reproduce.
  std::mt19937 rng(kMutationSeed);
  size_t total_bytes = 0;
  for (const std::filesystem::path& f : files) {
    std::vector<uint8_t> bytes;
    if (!ReadFile(f, &bytes)) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], f.c_str());
      return 1;
    }
    total_bytes += bytes.size();
    RunInput(bytes, mutations, &rng);
  }
  std::printf("%s: %zu inputs (%zu bytes), %d mutations each: no crash\n",
              std::filesystem::path(argv[0]).filename().c_str(), files.size(), total_bytes,
              mutations);
  return 0;
}
