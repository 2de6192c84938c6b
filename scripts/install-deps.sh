#!/usr/bin/env bash
# Installs tensorgrid's build and test dependencies from Debian 12 packages.
# Idempotent; uses sudo when not root. Set TG_SKIP_APT=1 to skip (dependencies present).
set -euo pipefail
[ "${TG_SKIP_APT:-0}" = 1 ] && exit 0
# python3-torch/numpy: the independent F32 reference the model tests compare tg-run with.
# gRPC/protobuf: the RPC service; prometheus-cpp: rpc-server's /metrics; libssl: SHA-256 of
# the weight cache; openssl/curl: the TLS and metrics tests make certificates and scrape.
# Vulkan backend: the loader and headers, glslc (shaders are compiled at build time), Mesa's
# lavapipe (a Vulkan driver on the CPU, what the "vulkan" tests run on without a GPU) and the
# Khronos validation layer (docs/vulkan.md).
# lld: links the programs about 2.4x faster than GNU ld (CMake uses it when present).
# nftables/iptables: the fault tests' link faults where the kernel has no netem (nft drop and
# loss on the bridge port; delayq.py's NFQUEUE delay): without them those tests skip.
pkgs=(cmake ninja-build g++ ccache git pkg-config lld
      libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
      python3 python3-numpy python3-torch
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
      prometheus-cpp-dev libssl-dev openssl curl
      libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers
      iproute2 nftables iptables)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
