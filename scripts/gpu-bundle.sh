#!/usr/bin/env bash
# Builds the release tools with CUDA for one GPU architecture and collects into one folder
# what a bare GPU machine needs to run the GPU check there (docs/gpu.md): the tools and the
# gpu-labelled test programs (stripped), the shared libraries such a machine lacks (gRPC,
# protobuf, Abseil, OpenBLAS, prometheus-cpp, ...; not the CUDA runtime, cuBLAS or NCCL, which
# gpu-check.sh finds on the machine), the models the check needs, and the check's scripts.
#
#   bash scripts/gpu-bundle.sh ARCH [OUT]
#
# ARCH: the GPU's compute capability without the dot, e.g. 90 (H100/H200), 89 (L4, RTX 40xx),
# 86 (A10, RTX 30xx), 80 (A100), 75 (T4). The kernels are compiled for ARCH only (machine
# code, no PTX: the bundle runs on that architecture). The host code is built for x86-64 with AVX2/FMA/F16C (not -march=native: the GPU
# machine's CPU is another one). Build folder: build/gpu-smARCH; bundle: OUT (default
# build/gpu-bundle-smARCH), also packed as OUT.tar.xz, the file to carry. Fails when that
# exceeds 48 MiB (the device tool carries 64 MiB with the working tree).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: bash scripts/gpu-bundle.sh ARCH [OUT], e.g. 90 for an H100}
[[ $arch =~ ^[0-9]+$ ]] || { echo "gpu-bundle: ARCH '$arch' is not a compute capability like 90" >&2; exit 2; }
out=${2:-build/gpu-bundle-sm$arch}
build=build/gpu-sm$arch
max_mib=48
cpu_flags="-mavx2;-mfma;-mf16c"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "gpu-bundle: no nvcc (looked on PATH and in /usr/local/cuda/bin)" >&2; exit 1; }

echo "gpu-bundle: configuring $build (sm_$arch, $nvcc)"
# ARCH-real: machine code for that GPU only, no PTX; compressed device code (every program
# carries all kernels: 3.3 MiB each uncompressed, under 1 MiB compressed).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_CUDA_FLAGS="-Xfatbin=-compress-all" \
  -DTG_CUDA=ON -DTG_CUDA_ARCHS="$arch-real" -DTG_NATIVE=OFF -DTG_CPU_FLAGS="$cpu_flags" \
  -DTG_BUILD_TESTS=ON -DTG_BUILD_BENCH=OFF >/dev/null
tools=(tg-ops tg-run tg-bench tg-gguf rpc-server)
tests=(cuda_gpu_test cuda_batch_session_gpu_test backend_conformance_test copy_bandwidth)
start=$(date +%s)
cmake --build "$build" -j "$(nproc)" --target "${tools[@]}" "${tests[@]}"
echo "gpu-bundle: built in $(( $(date +%s) - start )) s"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/models"
for t in "${tools[@]}" "${tests[@]}"; do
  path=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$path" ] || { echo "gpu-bundle: $t was not built" >&2; exit 1; }
  cp "$path" "$out/bin/$t"
  strip --strip-unneeded "$out/bin/$t"
done

# A llama-bench built here (`bash scripts/llama-cuda-peer.sh build SRC build/llama-cuda-smARCH
# ARCH`) travels prebuilt: the GPU machine then spends no device time compiling it.
peer_bin=$(find "build/llama-cuda-sm$arch/build" -type f -name llama-bench -perm -u+x 2>/dev/null | head -1)
if [ -n "$peer_bin" ] && grep -q "^llama-cuda-peer: built" "build/llama-cuda-sm$arch/build.log" 2>/dev/null; then
  mkdir -p "$out/peer/prebuilt"
  strip --strip-unneeded -o "$out/peer/prebuilt/llama-bench" "$peer_bin"
fi
# Shared libraries: everything the binaries load except the C library family (the machine's
# own) and CUDA's (the driver's, and the toolkit's or pip's that gpu-check.sh finds).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda\.so|libcudart|libcublas|libnccl|libnvidia)'
for b in "$out"/bin/* "$out"/peer/prebuilt/*; do
  [ -f "$b" ] || continue
  ldd "$b" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ $soname =~ $skip ]] && continue
  [ -f "$out/lib/$soname" ] || cp -L "$path" "$out/lib/$soname"
done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
# The C++ runtime is the machine's when it is new enough (this one may need a newer glibc than
# the machine has); gpu-check.sh falls back to these copies only when it is not.
mkdir -p "$out/lib/fallback"
for lib in libstdc++.so.6 libgcc_s.so.1; do
  [ -f "$out/lib/$lib" ] && mv "$out/lib/$lib" "$out/lib/fallback/"
done

cp demo/stories260K.gguf "$out/models/"
cp scripts/gpu-check.sh scripts/llama-cuda-peer.sh tests/gpu/compare_devices.py \
  tests/gpu/run_if_device.py tests/gpu/speed_report.py "$out/"
chmod +x "$out/gpu-check.sh"
# The llama.cpp peer's source, built on the GPU machine by `gpu-check.sh peer`.
peer_bundle=${TG_PEER_GIT_BUNDLE:-$HOME/.cache/tensorgrid-peer/main/package/llama/gitRelease.bundle}
if [ -f "$peer_bundle" ]; then
  bash scripts/llama-cuda-peer.sh pack "$out/peer/llama-src.tar.xz" "$peer_bundle"
else
  echo "gpu-bundle: no llama.cpp git bundle at $peer_bundle: the check runs without its peer" >&2
fi

# llama.cpp's Vulkan build for `gpu-check.sh vulkan`: the peer's prebuilt libraries (set up by
# PEER_VARIANT=vulkan ../shared/peer/llama-cpp-peer.sh setup) and its minibench with every
# layer on the GPU, 6.7 MiB compressed; skipped when the peer is not set up.
peer_vk=${PEER_DIR:-$HOME/.cache/tensorgrid-peer}
vk_bins=$peer_vk/linux-x64-vulkan/package/bins/linux-x64-vulkan
if [ -f "$vk_bins/libggml-vulkan.so" ] && [ -d "$peer_vk/src/include" ]; then
  vk_stage=$(mktemp -d)
  mkdir -p "$vk_stage/lib"
  cp "$vk_bins"/{libggml-base.so,libggml-vulkan.so,libggml-cpu-x64.so,libggml-cpu-haswell.so} \
    "$vk_bins"/libggml.vulkan.*.so "$vk_bins"/libllama.vulkan.*.so "$vk_stage/lib/"
  PEER_DIR=$peer_vk bash scripts/minibench-ngl.sh "$vk_stage/minibench-ngl" "$vk_stage/lib"
  tar -C "$vk_stage" -cf - minibench-ngl lib | xz -T0 -6 >"$out/peer-vulkan.tar.xz"
  rm -rf "$vk_stage"
else
  echo "gpu-bundle: no llama.cpp Vulkan peer in $peer_vk: gpu-check.sh vulkan runs without it" >&2
fi

# What the binaries need from the machine: the newest glibc symbol version, and cuBLAS.
newest() {  # newest version of symbol family $1 (GLIBC, GLIBCXX) the files $2.. import
  local family=$1
  shift
  for b in "$@"; do objdump -T "$b" 2>/dev/null; done | grep -o "${family}_[0-9.]*" | sort -uV | tail -1
}
glibc=$(newest GLIBC "$out"/bin/* "$out"/lib/*.so*)
glibcxx=$(newest GLIBCXX "$out"/bin/* "$out"/lib/*.so*)
cublas_major=$(awk '/#define CUBLAS_VER_MAJOR/ {print $3}' "$(dirname "$nvcc")/../include/cublas_api.h")
cat >"$out/MANIFEST" <<EOF
commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!build' || echo " (modified)")
cuda_arch $arch
nvcc $("$nvcc" --version | tail -1)
cpu_flags $cpu_flags
needs_glibc ${glibc#GLIBC_}
needs_glibcxx ${glibcxx#GLIBCXX_} (else lib/fallback, which needs glibc $(newest GLIBC "$out"/lib/fallback/* | sed 's/GLIBC_//'))
needs_cublas libcublas.so.$cublas_major
built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m)
EOF

# The device tool carries at most 64 MiB with the working tree: the bundle travels packed (the
# programs and libraries shrink to about a third; 53 MiB -> 16 MiB at 5024817) and is unpacked
# there with `tar -xJf`. The limit applies to the packed file.
packed=$out.tar.xz
pack_bundle() { tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 >"$packed"; }
pack_bundle
packed_kib=$(du -k "$packed" | cut -f1)
if (( packed_kib > max_mib * 1024 )) && [ -f "$out/peer-vulkan.tar.xz" ]; then
  rm "$out/peer-vulkan.tar.xz"  # the optional part: gpu-check.sh vulkan then gives INFO figures.
  echo "gpu-bundle: over $max_mib MiB packed with llama.cpp's Vulkan build: left out" >&2
  pack_bundle
  packed_kib=$(du -k "$packed" | cut -f1)
fi
echo "gpu-bundle: $out: $(du -sm "$out" | cut -f1) MiB ($(ls "$out/bin" | wc -l) programs," \
  "$(ls "$out/lib" | wc -l) libraries); packed: $packed, $(( packed_kib / 1024 )) MiB"
if (( packed_kib > max_mib * 1024 )); then
  echo "gpu-bundle: the packed bundle is over $max_mib MiB" >&2
  du -sk "$out"/bin/* "$out"/lib/* | sort -n | tail -8 >&2
  exit 1
fi
