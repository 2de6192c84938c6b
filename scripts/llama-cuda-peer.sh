#!/usr/bin/env bash
# llama.cpp's CUDA build as the GPU check's side-by-side peer (docs/gpu.md), from the llama.cpp
# source in the peer's git bundle, for one GPU architecture. Never committed. Either built here
# (no GPU needed: nvcc compiles for any architecture; about an hour on 2 cores) and carried
# prebuilt in the GPU bundle (gpu-bundle.sh packs build/llama-cuda-smARCH's llama-bench), or
# built on the GPU machine from the source the bundle carries (16 cores: minutes of device time).
#
#   bash scripts/llama-cuda-peer.sh pack OUT.tar.xz [GIT_BUNDLE]
#       The source a CUDA llama-bench needs (no models, docs, tests, web UI or other GPU
#       backends), from GIT_BUNDLE (default ~/.cache/tensorgrid-peer/main/package/llama/
#       gitRelease.bundle); about 6 MiB. Prints the commit.
#   bash scripts/llama-cuda-peer.sh build SRC BUILD_DIR [ARCH (90)] [JOBS (nproc)]
#       Configures and builds llama-bench with -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=ARCH-real
#       (static libraries, compressed device code, host code for AVX2/FMA/F16C as tensorgrid's
#       bundle: it runs on another machine's CPU) from SRC (a pack tarball or a source folder)
#       in BUILD_DIR; a second run only finishes what is missing (a build cut off by a time
#       limit resumes). Prints the path of llama-bench last.
set -euo pipefail
cmd=${1:?usage: llama-cuda-peer.sh pack OUT.tar.xz [GIT_BUNDLE] | build SRC BUILD_DIR [ARCH] [JOBS]}
shift

# What a CUDA llama-bench build reads of the source tree.
keep=(CMakeLists.txt cmake common ggml/CMakeLists.txt ggml/cmake ggml/include
      ggml/src/CMakeLists.txt ggml/src/ggml-cpu ggml/src/ggml-cuda include licenses LICENSE src
      tools vendor)
drop=(tools/server tools/ui)

pack() {
  local out=${1:?pack needs OUT.tar.xz}
  local bundle=${2:-$HOME/.cache/tensorgrid-peer/main/package/llama/gitRelease.bundle}
  [ -f "$bundle" ] || { echo "llama-cuda-peer: no git bundle at $bundle" >&2; exit 1; }
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  git clone -q "$bundle" "$tmp/src" 2>/dev/null
  local paths=("${keep[@]}")
  # ggml/src's own top-level sources (ggml.c, ggml-backend.cpp, ...).
  while read -r f; do paths+=("$f"); done < <(git -C "$tmp/src" ls-files 'ggml/src/*.*' | grep -v '/.*/.*/')
  local excludes=()
  for d in "${drop[@]}"; do excludes+=(":(exclude)$d"); done
  mkdir -p "$(dirname "$out")"
  git -C "$tmp/src" archive --format=tar --prefix=llama.cpp/ HEAD -- "${paths[@]}" "${excludes[@]}" |
    xz -6 -T0 >"$out"
  echo "llama-cuda-peer: packed $(git -C "$tmp/src" rev-parse --short HEAD) into $out ($(du -k "$out" | cut -f1) KiB)"
}

build() {
  local src=${1:?build needs SRC} dir=${2:?build needs BUILD_DIR} arch=${3:-90} jobs=${4:-$(nproc)}
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$src" ]; then
    if [ ! -f "$dir/src/CMakeLists.txt" ]; then
      mkdir -p "$dir/src"
      tar -xJf "$src" -C "$dir/src" --strip-components=1
    fi
    src=$dir/src
  fi
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  local nvcc
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  local t0
  t0=$(date +%s)
  if [ ! -f "$dir/build/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$dir/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_COMPILER="$nvcc" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch-real" \
      -DGGML_CUDA_COMPRESSION_MODE=size -DGGML_CUDA_NCCL=OFF \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
      -DGGML_F16C=ON >"$dir/configure.log" 2>&1 ||
      { tail -20 "$dir/configure.log" >&2; exit 1; }
  fi
  cmake --build "$dir/build" -j "$jobs" --target llama-bench >"$dir/build.log" 2>&1 ||
    { tail -20 "$dir/build.log" >&2; exit 1; }
  local bin
  bin=$(find "$dir/build" -type f -name llama-bench -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "llama-cuda-peer: llama-bench was not built" >&2; exit 1; }
  echo "llama-cuda-peer: built in $(( $(date +%s) - t0 )) s for sm_$arch with $jobs jobs" | tee -a "$dir/build.log"
  echo "$bin"
}

case $cmd in
  pack) pack "$@" ;;
  build) build "$@" ;;
  *) echo "llama-cuda-peer: unknown command '$cmd' (pack or build)" >&2; exit 2 ;;
esac
