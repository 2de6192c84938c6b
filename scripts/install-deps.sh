#!/usr/bin/env bash
# Installs tensorgrid's dependencies from Debian 12 packages: what building and running the
# programs needs (scripts/run.sh), and with --test also what the test suite needs
# (scripts/test.sh). Idempotent; uses sudo when not root. TG_SKIP_APT=1 skips it (dependencies
# present). Usage: bash scripts/install-deps.sh [--test]
set -euo pipefail
[ "${TG_SKIP_APT:-0}" = 1 ] && exit 0
case "${1:-}" in
  "") with_tests=0 ;;
  --test) with_tests=1 ;;
  -h|--help) sed -n '2,5s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "install-deps: unknown argument '$1' (usage: install-deps.sh [--test])" >&2; exit 2 ;;
esac
# Building and running. gRPC/protobuf: the RPC service; prometheus-cpp: rpc-server's /metrics;
# libssl: SHA-256 of the weight cache and TLS. Vulkan backend: the loader and headers, glslc
# (shaders are compiled at build time) and Mesa's drivers (AMD, Intel, and lavapipe on the CPU;
# docs/vulkan.md). lld links the programs about 2.4x faster than GNU ld (CMake uses it when
# present); ccache keeps a rebuild short. tg-server: cpp-httplib and nlohmann-json (the HTTP
# and JSON libraries llama-server uses too).
pkgs=(cmake ninja-build g++ ccache git pkg-config lld
      libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
      prometheus-cpp-dev libssl-dev openssl libcpp-httplib-dev nlohmann-json3-dev
      libvulkan-dev glslc mesa-vulkan-drivers)
# The tests. GoogleTest/Benchmark, OpenBLAS (the kernel benchmarks' yardstick);
# python3-torch/numpy: the independent F32 reference the model tests compare tg-run with;
# python3-jinja2: the reference the chat templates are rendered against (as transformers does);
# python3-grpcio/protobuf: the hostile tests' attack clients speak tensorgrid.v1 from Python;
# python3-yaml: the deploy tests read the compose and Kubernetes files without docker;
# clang: the thread_safety test's analysis (GCC has no -Wthread-safety); curl: the metrics
# tests scrape; the Khronos validation layer checks every Vulkan call in the
# vulkan tests; nftables/iptables: the fault tests' link faults where the kernel has no netem
# (nft drop and loss on the bridge port; delayq.py's NFQUEUE delay): without them those skip.
test_pkgs=(libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev clang
           python3 python3-numpy python3-torch python3-jinja2 python3-grpcio python3-protobuf python3-yaml
           curl vulkan-validationlayers
           iproute2 nftables iptables)
[ "$with_tests" = 1 ] && pkgs+=("${test_pkgs[@]}")
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
