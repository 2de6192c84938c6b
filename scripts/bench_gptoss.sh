#!/usr/bin/env bash
# gpt-oss vs llama.cpp (issue 18): a scaled-down synthetic gpt-oss (n_embd 1024, 4 layers,
# 16 heads over 4 KV heads, 16 MXFP4 experts of width 768 with 4 used, Q8_0 attention and
# head, vocab 32000), pp512 and tg128 at 2 threads, tensorgrid and the peer's AVX2 and
# AVX-512 CPU builds interleaved in each round, and with LLAMA_BIN set (a llama.cpp build's bin
# folder, e.g. one built from the peer source with native flags) its llama-bench too. Prints the
# load average before every run.
#
#   [LLAMA_BIN=DIR] scripts/bench_gptoss.sh [rounds] [reps]     (defaults 2 rounds, 3 repetitions)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${1:-2}"
reps="${2:-3}"
bin="$root/build/release/tools"
model="${GPTOSS_BENCH_MODEL:-/tmp/gptoss_bench_q8.gguf}"
[ -f "$model" ] || "$bin/tg-gguf/tg-gguf" synth "$model" --dims 1024,3072,4,16,4,32000 \
  --type q8_0 --arch gpt-oss --experts 16 --experts-used 4 --expert-ff 768
for round in $(seq 1 "$rounds"); do
  echo "== round $round: $(uptime)"
  flock /tmp/tg-bench.lock "$bin/tg-bench/tg-bench" -m "$model" -t 2 -r "$reps" -p 512 -n 128
  if [ -n "${LLAMA_BIN:-}" ]; then
    echo "== llama-bench $LLAMA_BIN: $(uptime)"
    flock /tmp/tg-bench.lock "$LLAMA_BIN/llama-bench" -m "$model" -t 2 -r "$reps" -p 512 -n 128
  fi
  for c in haswell $(grep -qw avx512f /proc/cpuinfo && echo zen4); do  # zen4: AVX-512 only.
    echo "== peer $c: $(uptime)"
    PEER_CPU=$c flock /tmp/tg-bench.lock bash "$root/../shared/peer/llama-cpp-peer.sh" bench \
      "$model" 2 512 128 "$reps"
  done
done
