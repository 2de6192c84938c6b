#!/usr/bin/env bash
# Vulkan on lavapipe, side by side in one run: tensorgrid's tg-bench on Vulkan0 and on the
# CPU, and llama.cpp's Vulkan build (the peer, ../shared/peer/llama-cpp-peer.sh) on the same
# lavapipe, for stories260K and the synthetic 15M-shape Q8_0 model; pp512 and tg128.
# Rounds are interleaved (every configuration once per round) and the table gives medians.
# The peer's minibench keeps the model on the CPU (n_gpu_layers 0: ggml then offloads only
# large-batch matrix products to Vulkan); a copy of it built here with all layers offloaded
# (n_gpu_layers 99) is measured as well, as "peer full offload".
#   bash scripts/bench_vulkan.sh [rounds=3] [threads=2]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-2}
peer=../shared/peer/llama-cpp-peer.sh
peer_dir=${PEER_DIR:-$HOME/.cache/tensorgrid-peer}
out=build/bench-vulkan
mkdir -p "$out"
export TG_VULKAN_CPU=1 GGML_VK_VISIBLE_DEVICES=0
export MESA_SHADER_CACHE_DIR="${MESA_SHADER_CACHE_DIR:-$HOME/.cache/tensorgrid/mesa-shader-cache}"
mkdir -p "$MESA_SHADER_CACHE_DIR"

cmake --preset release >/dev/null && cmake --build --preset release --target tg-bench tg-gguf >/dev/null
PEER_VARIANT=vulkan bash "$peer" setup >/dev/null
# The peer harness with n_gpu_layers from $NGL (the shared source, one line changed).
lib="$peer_dir/linux-x64-vulkan/package/bins/linux-x64-vulkan"
PEER_DIR=$peer_dir bash scripts/minibench-ngl.sh "$out/minibench-ngl" "$lib" "$lib"

q8=$out/stories15M-shape-q8_0.gguf
[ -f "$q8" ] || ./build/release/tools/tg-gguf/tg-gguf synth "$q8" --dims 288,768,6,6,6,32000 --type q8_0 >/dev/null
models=(demo/stories260K.gguf "$q8")

tg() {  # model device test -> t/s
  local args="-p 512 -n 0"; [ "$3" = tg128 ] && args="-p 0 -n 128"
  ./build/release/tools/tg-bench/tg-bench -m "$1" --device "$2" -t "$threads" -r 1 -o json $args |
    /usr/bin/python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)[0]["avg_ts"])'
}
peer_run() {  # model ngl -> "pp tg"
  NGL=$2 "$out/minibench-ngl" "$peer_dir/vulkan-haswell" "$1" "$threads" 512 128 1 2>/dev/null |
    sed -n 's/^pp512: mean \([0-9.]*\).*tg128: mean \([0-9.]*\).*/\1 \2/p'
}

results=$out/results.txt
: > "$results"
for r in $(seq "$rounds"); do
  for m in "${models[@]}"; do
    name=$(basename "$m" .gguf)
    for dev in Vulkan0 CPU; do
      for test in pp512 tg128; do echo "$name $test tg-$dev $(tg "$m" "$dev" "$test")" >> "$results"; done
    done
    # The documented peer command: PEER_VARIANT=vulkan ... llama-cpp-peer.sh bench (ngl 0).
    read -r pp tgv <<<"$(PEER_VARIANT=vulkan bash "$peer" bench "$m" "$threads" 512 128 1 2>/dev/null |
      sed -n 's/^pp512: mean \([0-9.]*\).*tg128: mean \([0-9.]*\).*/\1 \2/p')"
    echo "$name pp512 peer-vulkan $pp" >> "$results"; echo "$name tg128 peer-vulkan $tgv" >> "$results"
    read -r pp tgv <<<"$(peer_run "$m" 99)"
    echo "$name pp512 peer-vulkan-ngl99 $pp" >> "$results"; echo "$name tg128 peer-vulkan-ngl99 $tgv" >> "$results"
  done
  echo "round $r of $rounds done" >&2
done

/usr/bin/python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    model, test, who, value = line.split()
    rows.setdefault((model, test), {}).setdefault(who, []).append(float(value))
cols = ["tg-Vulkan0", "tg-CPU", "peer-vulkan", "peer-vulkan-ngl99"]
print("| model | test | tensorgrid Vulkan0 | tensorgrid CPU | llama.cpp Vulkan build (script, ngl 0) | llama.cpp Vulkan, full offload (ngl 99) | Vulkan0 / best llama.cpp |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for (model, test), by in rows.items():
    med = {c: statistics.median(by[c]) for c in cols if c in by}
    best_peer = max(med.get("peer-vulkan", 0), med.get("peer-vulkan-ngl99", 0))
    ratio = med["tg-Vulkan0"] / best_peer if best_peer else float("nan")
    print(f"| {model} | {test} | " + " | ".join(f"{med.get(c, float('nan')):.1f}" for c in cols) + f" | {ratio:.2f}x |")
PY
