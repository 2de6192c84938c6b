#!/usr/bin/env bash
# Builds a tensorgrid image from the repository, with BuildKit where the docker installation
# has it and with the classic builder where it does not:
#
#   build-image.sh cpu|cuda|vulkan [DOCKER_BUILD_ARGS...]   e.g. build-image.sh cpu -t my/tg:1
#
# The Dockerfiles use BuildKit cache mounts (RUN --mount=type=cache: apt packages and ccache
# kept between builds). BuildKit is there with docker 18.09..22 (DOCKER_BUILDKIT=1, built
# in: Debian 12's docker.io 20.10) or with the buildx plugin (docker 23 and later, whose
# `DOCKER_BUILDKIT=1 docker build` refuses to run without it; Debian 12 has no buildx
# package). Without either, the cache mounts are stripped and the classic builder builds
# the same image, every rebuild after a source edit then compiling from scratch.
# TG_BUILDER=buildkit|classic forces one; DOCKER (default docker) picks the client.
# The tag defaults to tensorgrid/BACKEND (give -t to change it).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
docker_cmd=${DOCKER:-docker}
log() { echo "build-image: $*" >&2; }
backend=${1:-}
[ -n "$backend" ] && [ "${backend#-}" = "$backend" ] || { sed -n '2,15p' "$0" >&2; exit 2; }
shift
dockerfile=$root/deploy/docker/$backend.Dockerfile
[ -f "$dockerfile" ] || { log "no $dockerfile (cpu, cuda or vulkan)"; exit 2; }
tag=()
case " $* " in *" -t "*|*" --tag "*|*" --tag="*|*" -t="*) ;; *) tag=(-t "tensorgrid/$backend") ;; esac

client_major() { $docker_cmd --version 2>/dev/null | sed -nE 's/^Docker version ([0-9]+)\..*/\1/p'; }

# Prints the Dockerfile without BuildKit-only syntax (the --mount options of RUN).
classic_dockerfile() {
  sed -E -e 's/--mount=[^ ]+ *//g' -e '/^[[:space:]]*\\$/d' "$dockerfile"
}

builder=${TG_BUILDER:-auto}
if [ "$builder" = auto ]; then
  if $docker_cmd buildx version >/dev/null 2>&1; then
    builder=buildkit
  elif [ "$(client_major)" != "" ] && [ "$(client_major)" -lt 23 ]; then
    builder=buildkit  # built into the client and daemon
  else
    builder=classic
    log "BuildKit is not available ($($docker_cmd --version 2>/dev/null || echo no docker)," \
        "no buildx plugin): building with the classic builder, without the cache mounts" \
        "(install docker-buildx, or docker-buildx-plugin from Docker's repository, for cached rebuilds)"
  fi
fi

case "$builder" in
  buildkit)
    log "BuildKit: $dockerfile"
    DOCKER_BUILDKIT=1 exec $docker_cmd build -f "$dockerfile" "${tag[@]}" "$@" "$root" ;;
  classic)
    if [ "${TG_BUILD_IMAGE_PRINT:-0}" = 1 ]; then classic_dockerfile; exit 0; fi
    log "classic builder: $dockerfile without its cache mounts"
    # The Dockerfile from stdin: a file in the context would end up in the image's sources.
    classic_dockerfile | DOCKER_BUILDKIT=0 exec $docker_cmd build -f - "${tag[@]}" "$@" "$root" ;;
  *) log "TG_BUILDER=$builder: buildkit or classic"; exit 2 ;;
esac
