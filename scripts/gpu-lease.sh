#!/usr/bin/env bash
# The GPU check in one call of a short device lease (docs/gpu.md): run from the repository root
# on the GPU machine, with the packed bundle (scripts/gpu-bundle.sh) carried at
# build/gpu-bundle-smARCH.tar.xz. Unpacks it, then runs gpu-check.sh's stages in order of
# value, each only while the deadline leaves it its estimate. Everything printed also goes to
# $OUT/check.txt, the check's logs to $OUT/logs.tgz after every stage, the machine's
# description to $OUT/machine.txt ($OUT: the device tool's folder that comes back; default
# /tmp/gpu-lease).
#
#   DEADLINE=555 bash scripts/gpu-lease.sh [ARCH (90)]
#
# DEADLINE: seconds from the start by which it stops (default 555, for a 600 s call); a stage
# that would run past it is cut off there, and those after it are skipped with a line saying so.
# Debian packages under .gl/ (the Vulkan loader, which the machine lacks) are unpacked into /
# first, as the device tool's notes say.
set -uo pipefail
cd "$(dirname "$0")/.."
arch=${1:-90}
t0=$(date +%s)
deadline=${DEADLINE:-555}
OUT=${OUT:-/tmp/gpu-lease}
mkdir -p "$OUT"
left() { echo $(( deadline - ($(date +%s) - t0) )); }

if [ -d .gl ] && [ -z "${TG_LEASE_NO_DEBS:-}" ]; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
tar -xJf "build/gpu-bundle-sm$arch.tar.xz" -C build ||
  { echo "gpu-lease: cannot unpack build/gpu-bundle-sm$arch.tar.xz" | tee -a "$OUT/check.txt"; exit 1; }
B=$PWD/build/gpu-bundle-sm$arch
{ nvidia-smi; nproc; free -g; lscpu | grep -i 'model name'; } >"$OUT/machine.txt" 2>&1
head -12 "$OUT/machine.txt"

save() { tar -C "$B" -czf "$OUT/logs.tgz" logs; }
stage() {  # ESTIMATE_S gpu-check.sh-args...
  local est=$1
  shift
  if [ "$(left)" -lt "$est" ]; then
    echo "SKIP stage '$*': $(left) s left, estimate $est s" | tee -a "$OUT/check.txt"
    return
  fi
  echo "=== stage '$*' at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/check.txt"
  timeout "$(( $(left) - 3 ))" bash "$B/gpu-check.sh" "$@" 2>&1 | tee -a "$OUT/check.txt"
  save
}
# Estimates from the H200 runs of 2026-11-28 (correctness 44 s, split 13 s) and the model sizes.
[ -x "$B/peer/prebuilt/llama-bench" ] && stage 10 peer
stage 100 correctness
stage 120 speed 8b q4_0
stage 40 split
stage 150 vulkan
stage 60 tunables
stage 100 speed 15m,1b
stage 150 speed 8b q4_k,q8_0
echo "gpu-lease: done at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/check.txt"
save
