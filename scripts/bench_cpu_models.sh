#!/usr/bin/env bash
# CPU decode and prompt speed of the memory-bound models (docs/benchmarks.md, "Mixture of
# experts on the CPU") against llama.cpp: scaled-down synthetic qwen3moe (Q8_0 and the Q4_K_M
# mix), gpt-oss (MXFP4 experts) and 1B-shape dense llamas (Q4_0, Q8_0). Every round runs every
# model on tensorgrid, on llama-bench from LLAMA_BIN (a llama.cpp build's bin folder, e.g. one
# built from the peer source with native flags) when set, and on the peer's AVX2 build, one
# after the other, so that the VM's changing memory bandwidth hits them alike; the two-thread
# stream read (cpu_kernels_bench) is measured before and after the dense Q8_0 model. Prints the
# raw lines, then a markdown table: t/s per round, and tensorgrid over the faster llama.cpp.
#
#   [LLAMA_BIN=DIR] bash scripts/bench_cpu_models.sh [rounds=3] [reps=2] [threads=2]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
reps=${2:-2}
threads=${3:-2}
bin=build/release
peer=../shared/peer/llama-cpp-peer.sh
dir=build/bench-models
mkdir -p "$dir"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

synth() {  # name args... -> the model's path, written when missing
  local m="$dir/$1.gguf"
  shift
  [ -f "$m" ] || "$bin/tools/tg-gguf/tg-gguf" synth "$m" "$@" >/dev/null
  echo "$m"
}
moe=(--dims 1024,3072,4,16,4,32000 --experts 16 --experts-used 4 --expert-ff 768)
models=(
  "$(synth qwen3moe-q8_0 "${moe[@]}" --arch qwen3moe --type q8_0)"
  "$(synth qwen3moe-q4_k_m "${moe[@]}" --arch qwen3moe --type q4_k_m)"
  "$(synth gpt-oss-mxfp4 "${moe[@]}" --arch gpt-oss --type q8_0)"
  "$(synth llama1b-q4_0 --dims 2048,5632,22,32,4,32000 --type q4_0)"
  "$(synth llama1b-q8_0 --dims 2048,5632,22,32,4,32000 --type q8_0)"
)

stream() {
  "$bin/bench/cpu_kernels_bench" --benchmark_filter='stream_read/256MiB' \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
    awk '/median/ {for (i = 1; i <= NF; ++i) if ($i ~ /^bytes_per_second=/) print "stream", $i}'
}

for r in $(seq 1 "$rounds"); do
  for m in "${models[@]}"; do
    echo "== round $r $(basename "$m" .gguf) load $(cut -d' ' -f1-3 /proc/loadavg)"
    [[ $m == *llama1b-q8_0* ]] && stream
    "$bin/tools/tg-bench/tg-bench" -m "$m" -p 512 -n 128 -t "$threads" -r "$reps" 2>&1 |
      awk -F'|' '/pp512|tg128/ {print "tensorgrid", $9, $10}'
    if [ -n "${LLAMA_BIN:-}" ]; then
      "$LLAMA_BIN/llama-bench" -m "$m" -p 512 -n 128 -t "$threads" -r "$reps" 2>&1 |
        awk -F'|' '/pp512|tg128/ {print "llama-native", $(NF-2), $(NF-1)}'
    fi
    bash "$peer" bench "$m" "$threads" 512 128 "$reps" 2>&1 | grep -E "pp512.*tg128" |
      sed 's/^/peer /'
    [[ $m == *llama1b-q8_0* ]] && stream
  done
done 2>&1 | tee "$log"

python3 - "$log" <<'EOF'
import re, sys
rows, order, model = {}, [], None
for line in open(sys.argv[1]):
    if m := re.match(r'== round \d+ (\S+)', line):
        model = m.group(1)
    elif m := re.match(r'(tensorgrid|llama-native)\s+(pp512|tg128)\s+([\d.]+)', line):
        rows.setdefault((model, m.group(2)), {}).setdefault(m.group(1), []).append(float(m.group(3)))
    elif m := re.match(r'peer pp512: mean ([\d.]+).*tg128: mean ([\d.]+)', line):
        for test, v in (('pp512', m.group(1)), ('tg128', m.group(2))):
            rows.setdefault((model, test), {}).setdefault('peer', []).append(float(v))
fmt = lambda v: ' / '.join(f'{x:.0f}' if x >= 100 else f'{x:.1f}' for x in v)
builds = ['tensorgrid', 'llama-native', 'peer']
print('| model | test | ' + ' | '.join(builds) + ' | per round |')
print('| --- | --- |' + ' ---: |' * (len(builds) + 1))
for (model, test), d in rows.items():
    llama = [max(x) for x in zip(*[d[b] for b in builds[1:] if b in d])]
    ratios = [t / l for t, l in zip(d.get('tensorgrid', []), llama)]
    cells = [fmt(d.get(b, [])) for b in builds]
    span = f'{min(ratios):.2f}-{max(ratios):.2f}x' if ratios else '-'
    print(f'| {model} | {test} | ' + ' | '.join(cells) + f' | {span} |')
EOF
