#!/usr/bin/env bash
# A/B speed of the quantized dot tile kernels (Q4_K, Q6_K, Q8_0: 4 weight rows x 1 and x 4
# activation columns, k = 16384, one thread) as of revision REV against the working tree:
# the kernels' sources of each side are compiled into one small program each (same flags as
# the release build, -march=native), and the two run in ROUNDS interleaved rounds; prints
# each case's median and minimum us per tile call. tg-ops perf has no batched q4_K/q6_K case,
# so this covers the tiles that tg-ops perf's matvec cases do not.
#   bash scripts/bench_dot_tiles_ab.sh [REV=main] [ROUNDS=31]
# Needs build/release's libtg_cpu.a and libtg_core.a (cmake --build --preset release
# --target tg_cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-main}
rounds=${2:-31}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
files=(vec_dot_simd.h vec_dot_superblock.h vec_dot_q4_k.cc vec_dot_q6_k.cc vec_dot_q8_0.cc)
mkdir -p "$work/A/backends/cpu/kernels" "$work/B/backends/cpu/kernels"
for f in "${files[@]}"; do
  git show "$rev:backends/cpu/kernels/$f" >"$work/A/backends/cpu/kernels/$f"
  cp "backends/cpu/kernels/$f" "$work/B/backends/cpu/kernels/$f"
done
cat >"$work/tiles.cc" <<'CC'
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/kernels/vec_dot_simd.h"
#include "core/quants.h"

using namespace tg;
using namespace tg::cpu;

double UsPerTile(const DotKernels& kern, DType type, int rows, int cols) {
  constexpr int64_t kK = 16384;
  constexpr int kReps = 10000;
  std::mt19937 g(1);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> w(kK * rows), x(kK * cols);
  for (float& v : w) v = d(g);
  for (float& v : x) v = d(g);
  const size_t row_bytes = RowBytes(type, kK);
  std::vector<char> wq(row_bytes * rows);
  for (int r = 0; r < rows; ++r) QuantizeRow(type, &w[r * kK], &wq[r * row_bytes], kK);
  const void* b[4];
  float out[4][8];
  float* c[4];
  for (int j = 0; j < cols; ++j) {
    char* act = static_cast<char*>(std::aligned_alloc(64, (kern.act_row_bytes(kK) + 127) / 64 * 64));
    kern.from_f32(&x[j * kK], act, kK);
    b[j] = act;
    c[j] = out[j];
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReps; ++i) kern.tile(kK, wq.data(), row_bytes, rows, b, cols, c);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
         kReps;
}

int main() {
  const struct {
    const char* name;
    const DotKernels* kern;
    DType type;
  } kCases[] = {{"q4_K", &simd::kDotQ4_K, DType::kQ4_K},
                {"q6_K", &simd::kDotQ6_K, DType::kQ6_K},
                {"q8_0", &simd::kDotQ8_0, DType::kQ8_0}};
  for (const auto& e : kCases) {
    for (int cols : {1, 4}) std::printf("%s_4x%d %.3f\n", e.name, cols, UsPerTile(*e.kern, e.type, 4, cols));
  }
}
CC
libs=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format)
for side in A B; do
  src=()
  for f in vec_dot_q4_k.cc vec_dot_q6_k.cc vec_dot_q8_0.cc; do src+=("$work/$side/backends/cpu/kernels/$f"); done
  c++ -O3 -DNDEBUG -march=native -std=c++20 -I"$work/$side" -I. "$work/tiles.cc" "${src[@]}" \
    build/release/backends/cpu/libtg_cpu.a build/release/core/libtg_core.a $libs -o "$work/tiles_$side"
done
echo "load before: $(uptime)"
for ((r = 0; r < rounds; ++r)); do
  "$work/tiles_A" | sed 's/^/A /'
  "$work/tiles_B" | sed 's/^/B /'
done >"$work/rows"
echo "load after:  $(uptime)"
python3 - "$work/rows" "$rev" "$rounds" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    side, case, us = line.split()
    t[case][side].append(float(us))
print(f"us per tile call, {sys.argv[3]} interleaved rounds; A = {sys.argv[2]}, B = working tree")
print(f"{'case':10} {'A med':>8} {'B med':>8} {'B/A':>6} {'A min':>8} {'B min':>8} {'B/A':>6}")
for case, v in t.items():
    a, b = statistics.median(v["A"]), statistics.median(v["B"])
    print(f"{case:10} {a:8.3f} {b:8.3f} {b / a:6.3f} {min(v['A']):8.3f} {min(v['B']):8.3f} "
          f"{min(v['B']) / min(v['A']):6.3f}")
PY
