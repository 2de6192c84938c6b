#!/usr/bin/env bash
# The whole test suite from a fresh checkout: installs dependencies, builds the release and
# the asan (ASan+UBSan) presets, and runs ctest on both. Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
# The llama.cpp peer's libggml-base.so is the yardstick for bit-exact quant layouts; set it
# up when ../shared is there (the test skips with a reason when it is not).
if [ -x ../shared/peer/llama-cpp-peer.sh ] && command -v npm >/dev/null && command -v gcc >/dev/null; then
  bash ../shared/peer/llama-cpp-peer.sh setup >/dev/null 2>&1 || echo "test.sh: peer setup failed; ggml parity tests will skip"
fi
# Mesa keeps the Vulkan kernels it compiled for lavapipe here across runs (CMake points the
# "vulkan" tests at the same directory): a cold cache costs minutes of shader compiles.
export MESA_SHADER_CACHE_DIR="${MESA_SHADER_CACHE_DIR:-$HOME/.cache/tensorgrid/mesa-shader-cache}"
mkdir -p "$MESA_SHADER_CACHE_DIR"
jobs=$(nproc)
# Twice as many tests as cores: the process tests (rpc, faults, split) spend much of their
# time waiting on sockets, timeouts and child processes. On 2 cores the release suite took
# 320 s at -j 2 (117% CPU) and 212 s at -j 4 (169%); docs/testing.md, "How long CI takes".
test_jobs=$((2 * jobs))
for preset in release asan; do
  echo "=== $preset: configure + build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== $preset: ctest"
  # The presets leave out the soak (label soak, 10-20 minutes; on demand: ctest --preset soak)
  # and, under ASan, what CMakePresets.json's asan test preset says.
  ctest --preset "$preset" -j "$test_jobs"
done
