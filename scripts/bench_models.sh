#!/usr/bin/env bash
# Side-by-side model speed: tensorgrid's tg-bench against the llama.cpp peer, same models,
# same thread count, in one run. Two tensorgrid builds (AVX2 and native/AVX-512) against the
# peer's AVX2 ("haswell") and AVX-512 ("zen4") CPU builds. Every round runs all four on every
# model, one after the other (so a burst of load from elsewhere hits all of them alike); the
# table shows each cell's median over the rounds. Prints a markdown table.
#   bash scripts/bench_models.sh [threads=2] [reps=5] [rounds=1] [types...]
# types: synth --type names for stories15M-shape models (default: f32 q8_0 q4_0 q4_k q5_k
# q3_k iq4_xs); the real stories260K is always first.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
reps=${2:-5}
rounds=${3:-1}
shift $(( $# < 3 ? $# : 3 ))
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(f32 q8_0 q4_0 q4_k q5_k q3_k iq4_xs)
peer=../shared/peer/llama-cpp-peer.sh
models_dir=build/bench-models
mkdir -p "$models_dir"

# Builds: native (-march=native: AVX-512 here) and a portable AVX2+FMA+F16C one.
cmake --preset release >/dev/null && cmake --build --preset release >/dev/null
cmake -S . -B build/avx2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_NATIVE=OFF \
  "-DTG_CPU_FLAGS=-mavx2;-mfma;-mf16c;-mbmi2" -DTG_BUILD_TESTS=OFF -DTG_BUILD_BENCH=OFF >/dev/null
cmake --build build/avx2 --target tg-bench tg-gguf >/dev/null

gguf=./build/release/tools/tg-gguf/tg-gguf
models=(demo/stories260K.gguf)
for type in "${types[@]}"; do
  m="$models_dir/stories15M-shape-$type.gguf"
  # Rewritten whenever tg-gguf changed: the type choices (mixes, fallbacks) live in it.
  [ "$m" -nt "$gguf" ] || "$gguf" synth "$m" --dims 288,768,6,6,6,32000 --type "$type" >/dev/null
  models+=("$m")
done

tg() {  # build model -> "pp tg" (t/s)
  local pp tgs
  pp=$("$1/tools/tg-bench/tg-bench" -m "$2" -t "$threads" -r "$reps" -o json -p 512 -n 0)
  tgs=$("$1/tools/tg-bench/tg-bench" -m "$2" -t "$threads" -r "$reps" -o json -p 0 -n 128)
  /usr/bin/python3 -c 'import json,sys; print("%.1f %.1f" % (json.loads(sys.argv[1])[0]["avg_ts"], json.loads(sys.argv[2])[0]["avg_ts"]))' "$pp" "$tgs"
}
peer() {  # cpu model -> "pp tg" (t/s)
  PEER_CPU=$1 bash "$peer" bench "$2" "$threads" 512 128 "$reps" 2>/dev/null |
    sed -n 's/^pp512: mean \([0-9.]*\).*tg128: mean \([0-9.]*\).*/\1 \2/p'
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 0; r < rounds; r++)); do
  for i in "${!models[@]}"; do
    m=${models[$i]}
    echo "$i peer_avx2 $(peer haswell "$m")" >>"$results"
    echo "$i peer_avx512 $(peer zen4 "$m")" >>"$results"
    echo "$i tg_avx2 $(tg build/avx2 "$m")" >>"$results"
    echo "$i tg_avx512 $(tg build/release "$m")" >>"$results"
  done
done

names=()
for m in "${models[@]}"; do names+=("$(basename "$m" .gguf)"); done
/usr/bin/python3 - "$results" "$rounds" "${names[@]}" <<'EOF'
import collections, statistics, sys
path, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
cells = collections.defaultdict(list)  # (model, who, test) -> values over rounds
for line in open(path):
    i, who, pp, tg = line.split()
    cells[(int(i), who, "pp512")].append(float(pp))
    cells[(int(i), who, "tg128")].append(float(tg))
med = lambda k: statistics.median(cells[k])
print(f"medians over {rounds} round(s)")
print("| model | test | tg AVX2 | tg AVX-512 | peer AVX2 | peer AVX-512 | best tg / best peer |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for i, name in enumerate(names):
    for test in ("pp512", "tg128"):
        a, n, q2, q5 = (med((i, w, test)) for w in ("tg_avx2", "tg_avx512", "peer_avx2", "peer_avx512"))
        print(f"| {name} | {test} | {a:.1f} | {n:.1f} | {q2:.1f} | {q5:.1f} | {max(a, n) / max(q2, q5):.2f}x |")
EOF
