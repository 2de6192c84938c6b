#!/usr/bin/env bash
# Side-by-side model speed: tensorgrid's tg-bench against the llama.cpp peer, same models,
# same thread count, in one run. Two tensorgrid builds (AVX2 and native/AVX-512) against the
# peer's AVX2 ("haswell") and AVX-512 ("zen4") CPU builds. Prints a markdown table.
#   bash scripts/bench_models.sh [threads=2] [reps=5]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
reps=${2:-5}
peer=../shared/peer/llama-cpp-peer.sh
models_dir=build/bench-models
mkdir -p "$models_dir"

# Builds: native (-march=native: AVX-512 here) and a portable AVX2+FMA+F16C one.
cmake --preset release >/dev/null && cmake --build --preset release >/dev/null
cmake -S . -B build/avx2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_NATIVE=OFF \
  "-DTG_CPU_FLAGS=-mavx2;-mfma;-mf16c;-mbmi2" -DTG_BUILD_TESTS=OFF -DTG_BUILD_BENCH=OFF >/dev/null
cmake --build build/avx2 --target tg-bench tg-gguf >/dev/null

models=(../shared/models/stories260K.gguf)
for type in f32 q8_0 q4_0 q4_k; do
  m="$models_dir/stories15M-shape-$type.gguf"
  [ -f "$m" ] || ./build/release/tools/tg-gguf/tg-gguf synth "$m" --dims 288,768,6,6,6,32000 --type "$type" >/dev/null
  models+=("$m")
done

tg() {  # build model test -> t/s
  local out
  out=$("$1/tools/tg-bench/tg-bench" -m "$2" -t "$threads" -r "$reps" -o json \
        $([ "$3" = pp512 ] && echo "-p 512 -n 0" || echo "-p 0 -n 128"))
  /usr/bin/python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)[0]["avg_ts"])' <<<"$out"
}
peer() {  # cpu model -> "pp tg"
  PEER_CPU=$1 bash "$peer" bench "$2" "$threads" 512 128 "$reps" 2>/dev/null |
    sed -n 's/^pp512: mean \([0-9.]*\).*tg128: mean \([0-9.]*\).*/\1 \2/p'
}

echo "| model | test | tg AVX2 | tg AVX-512 | peer AVX2 | peer AVX-512 | best tg / best peer |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for m in "${models[@]}"; do
  read -r p2pp p2tg <<<"$(peer haswell "$m")"
  read -r p5pp p5tg <<<"$(peer zen4 "$m")"
  for test in pp512 tg128; do
    a=$(tg build/avx2 "$m" "$test"); n=$(tg build/release "$m" "$test")
    if [ "$test" = pp512 ]; then q2=$p2pp; q5=$p5pp; else q2=$p2tg; q5=$p5tg; fi
    ratio=$(/usr/bin/python3 -c "print('%.2f' % (max($a,$n)/max($q2,$q5)))")
    echo "| $(basename "$m" .gguf) | $test | $a | $n | $q2 | $q5 | ${ratio}x |"
  done
done
