#!/usr/bin/env bash
# The steps every tensorgrid Dockerfile runs in its build stage (one copy instead of three):
#
#   build.sh deps [EXTRA_PACKAGES...]   apt-get the build dependencies (Debian 12 / Ubuntu 24.04)
#   build.sh build [CMAKE_ARGS...]      configure and build rpc-server, tg-run, tg-bench, tg-gguf
#   build.sh collect OUT                the binaries (stripped) in OUT/bin and the shared
#                                       libraries they load, but glibc's, in OUT/lib
#
# Environment: TG_SRC (default /src), TG_BUILD (default /build), TG_CPU_FLAGS (ISA flags of a
# portable build; images run on other machines than the one that built them),
# TG_COLLECT_EXCLUDE (a regex of library names the runtime base provides, e.g. CUDA's).
set -euo pipefail

src=${TG_SRC:-/src}
build=${TG_BUILD:-/build}
targets=(rpc-server tg-run tg-bench tg-gguf)

deps() {
  export DEBIAN_FRONTEND=noninteractive
  # Keep downloaded packages for the BuildKit apt cache mount (the slim images delete them).
  rm -f /etc/apt/apt.conf.d/docker-clean
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    cmake ninja-build g++ ccache pkg-config binutils ca-certificates \
    libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
    prometheus-cpp-dev libssl-dev "$@" >/dev/null
}

build() {
  # TG_NATIVE=OFF: -march=native would tie the image to the build host's CPU.
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTG_NATIVE=OFF "-DTG_CPU_FLAGS=${TG_CPU_FLAGS:--mavx2;-mfma;-mf16c}" \
    -DTG_BUILD_TESTS=OFF -DTG_BUILD_BENCH=OFF "$@"
  ccache --zero-stats >/dev/null 2>&1 || true
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
  ccache --show-stats 2>/dev/null | grep -Ei 'hits|misses' || true
}

collect() {
  local out=$1
  mkdir -p "$out/bin" "$out/lib"
  for t in "${targets[@]}"; do
    local bin
    bin=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
    [ -n "$bin" ] || { echo "build.sh: $t was not built under $build" >&2; exit 1; }
    strip --strip-unneeded -o "$out/bin/$t" "$bin"
  done
  # glibc (and its loader) must be the runtime base's own; everything else comes along, so
  # the runtime stage installs no -dev package and no compiler.
  ldd "$out"/bin/* | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[^/]*)\.so' |
    { if [ -n "${TG_COLLECT_EXCLUDE:-}" ]; then grep -Ev "/(${TG_COLLECT_EXCLUDE})\.so" || true; else cat; fi; } |
    while read -r lib; do cp -L "$lib" "$out/lib/"; done
  echo "build.sh: $(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries," \
       "$(du -sh "$out" | cut -f1)"
}

cmd=${1:-}
shift || true
case "$cmd" in
  deps) deps "$@" ;;
  build) build "$@" ;;
  collect) collect "${1:?collect OUT}" ;;
  *) sed -n '2,10p' "$0" >&2; exit 2 ;;
esac
