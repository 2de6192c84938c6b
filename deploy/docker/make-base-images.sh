#!/usr/bin/env bash
# Makes the base images the Dockerfiles start from, locally, for hosts that cannot reach
# Docker Hub but can reach a Debian mirror: debootstrap a minimal bookworm, slim it the way
# the official debian:bookworm-slim is slimmed (no docs, man pages or locales), `docker
# import` it and tag it debian:bookworm-slim. The Dockerfiles then build unchanged; where
# Docker Hub is reachable this script is not needed.
#
#   make-base-images.sh [--cuda [CUDA_HOME]] [--force] [--mirror URL] [--work DIR]
#
#   --cuda [DIR]  also make tensorgrid/cuda-local:devel and :runtime, bookworm images that
#                 hold the CUDA toolkit of this host (default /usr/local/cuda), for building
#                 Dockerfile.cuda without the nvidia/cuda images (see docs/deployment.md).
#   --force       remake images that already exist.
#
# Needs root (debootstrap), debootstrap and a docker client; DOCKER (default: docker) and
# DOCKER_HOST pick the engine.
set -euo pipefail

docker_cmd=${DOCKER:-docker}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
base_tag=debian:bookworm-slim
cuda_home=""
force=0
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda)
      cuda_home=/usr/local/cuda
      if [ $# -gt 1 ] && [ "${2#-}" = "$2" ]; then cuda_home=$2; shift; fi ;;
    --force) force=1 ;;
    --mirror) mirror=$2; shift ;;
    --work) work=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "make-base-images: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

have_image() { [ "$force" = 0 ] && $docker_cmd image inspect "$1" >/dev/null 2>&1; }
log() { echo "make-base-images: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  log "debootstrap needs root; run as root (or with sudo)"
  exit 1
fi
command -v debootstrap >/dev/null || { log "debootstrap is missing: apt-get install debootstrap"; exit 1; }

scratch=$(mktemp -d "${work:-${TMPDIR:-/tmp}}/tg-base.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# The official slim images keep dpkg from installing these paths (debuerreotype's
# "slimify"); keeping the same rule means later apt-get installs stay slim too.
slimify() {
  local root=$1
  cat > "$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' > "$root/etc/apt/apt.conf.d/docker-no-languages"
  rm -f "$root/etc/apt/sources.list"
  cat > "$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  find "$root/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
  rm -rf "$root"/usr/share/{man,groff,info,lintian,linda}/* "$root"/var/lib/apt/lists/* \
         "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/log/*.log \
         "$root"/tmp/* "$root"/root/.bash_history
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias \
       -exec rm -rf {} + 2>/dev/null || true
  : > "$root/etc/machine-id"
  rm -f "$root/etc/hostname" "$root/etc/resolv.conf"
}

import_rootfs() {  # DIR TAG
  tar --numeric-owner --xattrs -C "$1" -c . |
    $docker_cmd import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$2" >/dev/null
  log "$2: $($docker_cmd image inspect -f '{{.Size}}' "$2" | awk '{printf "%.1f MB", $1/1e6}')"
}

if have_image "$base_tag"; then
  log "$base_tag exists (use --force to remake it)"
else
  log "debootstrap --variant=minbase $suite from $mirror (a few minutes)"
  debootstrap --variant=minbase "$suite" "$scratch/rootfs" "$mirror" >"$scratch/debootstrap.log" 2>&1 ||
    { tail -20 "$scratch/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }
  slimify "$scratch/rootfs"
  import_rootfs "$scratch/rootfs" "$base_tag"
fi

# CUDA: the toolkit of this host on top of the base: the compiler, headers and the libraries a
# CUDA backend links (cudart, cuBLAS, NCCL) for :devel; the libraries alone for :runtime.
# Debian's own glibc/libstdc++ serve both, so nothing else from the host is copied.
if [ -n "$cuda_home" ]; then
  cuda_real=$(readlink -f "$cuda_home")
  [ -x "$cuda_real/bin/nvcc" ] || { log "--cuda: no nvcc in $cuda_real/bin"; exit 1; }
  runtime_libs=(libcudart.so* libcublas.so* libcublasLt.so* libnccl.so*)
  make_cuda_image() {  # TAG devel|runtime
    local tag=$1 kind=$2 ctx=$scratch/cuda-$2
    if have_image "$tag"; then log "$tag exists (use --force to remake it)"; return; fi
    mkdir -p "$ctx/cuda/lib64"
    local libdir
    libdir=$(readlink -f "$cuda_real/lib64")
    for pattern in "${runtime_libs[@]}"; do
      # shellcheck disable=SC2086
      (cd "$libdir" && cp -a $pattern "$ctx/cuda/lib64/" 2>/dev/null) || true
    done
    if [ "$kind" = devel ]; then
      cp -a "$cuda_real"/{bin,include,nvvm} "$ctx/cuda/"
      (cd "$libdir" && cp -a libcudadevrt.a libcudart_static.a libculibos.a "$ctx/cuda/lib64/" 2>/dev/null) || true
      [ -d "$libdir/stubs" ] && cp -a "$libdir/stubs" "$ctx/cuda/lib64/"
      [ -d "$cuda_real/lib/cmake" ] && mkdir -p "$ctx/cuda/lib" && cp -a "$cuda_real/lib/cmake" "$ctx/cuda/lib/"
      cp -a "$cuda_real/version.json" "$ctx/cuda/" 2>/dev/null || true
      # CUDA 13 has no libnvToolsExt (nvtx3 is header-only), and Debian 12's CMake 3.25
      # FindCUDAToolkit then fails on the missing target; an empty stub (never linked by
      # tensorgrid) lets it through. Newer CMake (the nvidia/cuda images) needs none.
      if ! ls "$libdir"/libnvToolsExt.so* >/dev/null 2>&1; then
        mkdir -p "$ctx/cuda/lib64/stubs"
        gcc -shared -x c /dev/null -o "$ctx/cuda/lib64/stubs/libnvToolsExt.so" ||
          { log "--cuda: gcc is needed for the libnvToolsExt stub of CUDA 13"; exit 1; }
      fi
    fi
    cat > "$ctx/Dockerfile" <<EOF
FROM $base_tag
COPY cuda /usr/local/cuda
RUN echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/cuda.conf && ldconfig
ENV PATH=/usr/local/cuda/bin:\$PATH CUDA_HOME=/usr/local/cuda \\
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
EOF
    $docker_cmd build -q -t "$tag" "$ctx" >/dev/null
    log "$tag: $($docker_cmd image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.1f MB", $1/1e6}') (CUDA from $cuda_real)"
  }
  make_cuda_image tensorgrid/cuda-local:devel devel
  make_cuda_image tensorgrid/cuda-local:runtime runtime
fi
