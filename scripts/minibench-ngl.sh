#!/usr/bin/env bash
# Builds the llama.cpp peer's benchmark harness (../shared/peer/minibench.c) with its one
# setting changed: n_gpu_layers from $NGL at run time (0 when unset), so that a Vulkan build
# can be measured with every layer on the device. Used by bench_vulkan.sh (lavapipe) and
# gpu-bundle.sh (the GPU check's llama.cpp Vulkan figures).
#   bash scripts/minibench-ngl.sh OUT LIBDIR [RPATH]
# LIBDIR holds the peer's libllama*.so, libggml.*.so and libggml-base.so (the Vulkan
# package's bins, or a copy of them); headers come from the peer's unpacked source in
# $PEER_DIR (default ~/.cache/tensorgrid-peer). RPATH, when given, is written into OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: minibench-ngl.sh OUT LIBDIR [RPATH]}
lib=${2:?usage: minibench-ngl.sh OUT LIBDIR [RPATH]}
rpath=${3:-}
peer_dir=${PEER_DIR:-$HOME/.cache/tensorgrid-peer}
src=$(mktemp --suffix=.c)
trap 'rm -f "$src"' EXIT
sed 's/mp.n_gpu_layers=0;/mp.n_gpu_layers=getenv("NGL")?atoi(getenv("NGL")):0;/' \
  ../shared/peer/minibench.c >"$src"
gcc -O2 -o "$out" "$src" -I"$peer_dir/src/include" -I"$peer_dir/src/ggml-include" -L"$lib" \
  -l:"$(cd "$lib" && ls libllama*.so | grep -v common | head -1)" \
  -l:"$(cd "$lib" && ls libggml.*.so | head -1)" -l:libggml-base.so -lm \
  ${rpath:+-Wl,-rpath,"$rpath"}
