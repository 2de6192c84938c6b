// Random weight generation for `tg-gguf synth` (see synth_weights.h).
#include "models/synth/synth_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numbers>
#include <thread>
#include <vector>

#include "core/quants.h"

namespace tg::synth {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// An odd constant with well-mixed bits (from a multiplicative hash), so chunk indices land far
// apart in seed space before SplitMix64 scrambles them.
constexpr uint64_t kChunkSeedStep = 0xD1B54A32D192ED03ull;

// The seed of rows [c * kRowsPerChunk, (c + 1) * kRowsPerChunk) of a tensor.
uint64_t ChunkSeed(uint64_t tensor_seed, int64_t c) {
  uint64_t state = tensor_seed ^ (static_cast<uint64_t>(c) * kChunkSeedStep);
  return SplitMix64(&state);
}

}  // namespace

NormalRng::NormalRng(uint64_t seed) {
  for (uint64_t& s : s_) s = SplitMix64(&seed);
}

uint64_t NormalRng::NextU64() {  // xoshiro256** 1.0 (Blackman & Vigna).
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

float NormalRng::Next() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  // Two uniforms in (0, 1] and [0, 1) from the top 53 bits; u1 > 0 keeps log finite.
  constexpr double kInv53 = 1.0 / 9007199254740992.0;  // 2^-53.
  const double u1 = static_cast<double>((NextU64() >> 11) + 1) * kInv53;
  const double u2 = static_cast<double>(NextU64() >> 11) * kInv53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = static_cast<float>(r * std::sin(theta));
  have_spare_ = true;
  return static_cast<float>(r * std::cos(theta));
}

uint64_t TensorSeed(uint64_t seed, absl::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over the name, mixed with the seed.
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  uint64_t state = seed ^ h;
  return SplitMix64(&state);
}

std::vector<uint8_t> RandomTensor(DType type, int64_t ne0, int64_t rows, float mean, float stddev,
                                  uint64_t seed, int threads) {
  const size_t row_bytes = RowBytes(type, ne0);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  const int64_t n_chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::atomic<int64_t> next_chunk{0};
  auto work = [&] {
    std::vector<float> row(static_cast<size_t>(ne0));
    for (int64_t c = next_chunk++; c < n_chunks; c = next_chunk++) {
      // Each chunk draws from its own stream, so the values do not depend on the threads.
      NormalRng rng(ChunkSeed(seed, c));
      const int64_t end = std::min(rows, (c + 1) * kRowsPerChunk);
      for (int64_t r = c * kRowsPerChunk; r < end; ++r) {
        for (float& x : row) x = mean + stddev * rng.Next();
        QuantizeRow(type, row.data(), out.data() + static_cast<size_t>(r) * row_bytes, ne0);
      }
    }
  };
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t n_threads = std::min<int64_t>(threads, n_chunks);
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < n_threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& h : helpers) h.join();
  return out;
}

}  // namespace tg::synth
