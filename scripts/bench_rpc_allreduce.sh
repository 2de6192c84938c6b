#!/usr/bin/env bash
# -sm tensor over two rpc-servers on loopback, the all-reduce run by the servers among
# themselves (TG_RPC_ALLREDUCE=servers, the default) against the same run with the all-reduce
# staged through the client (TG_RPC_ALLREDUCE=client), for docs/benchmarks.md: tg-bench pp512
# and tg128 of the synthetic 15M-shape Q8_0 model, in ROUNDS interleaved rounds (each round
# runs both routes back to back), medians per route and of the per-round ratios. Each server
# exposes one CPU device running THREADS threads.
# Usage: bash scripts/bench_rpc_allreduce.sh [THREADS] [ROUNDS] [REPS]   (build/release built)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
rounds=${2:-7}
reps=${3:-3}
bin=build/release
model=${TG_BENCH_MODEL:-/tmp/tg-bench-15m-q8_0.gguf}
[ -f "$model" ] || $bin/tools/tg-gguf/tg-gguf synth "$model" --dims 288,768,6,6,6,32000 --type q8_0 >/dev/null
work=$(mktemp -d)
trap 'for p in "$work"/pid*; do kill "$(cat "$p")" 2>/dev/null || true; done; rm -rf "$work"' EXIT

endpoints=()
for i in 0 1; do
  TG_CPU_DEVICES=1 $bin/server/rpc-server -p 0 --port-file "$work/port$i" -t "$threads" \
      --cache "$work/cache$i" >"$work/server$i.log" 2>&1 &
  echo $! >"$work/pid$i"
  for _ in $(seq 100); do [ -s "$work/port$i" ] && break; sleep 0.05; done
  endpoints+=("127.0.0.1:$(cat "$work/port$i")")
done
rpc="${endpoints[0]},${endpoints[1]}"
devices="RPC[${endpoints[0]}]/0,RPC[${endpoints[1]}]/0"
# t/s of one test (csv column 13) with the all-reduce on route $1.
ts() {
  TG_RPC_ALLREDUCE=$1 $bin/tools/tg-bench/tg-bench -m "$model" -r "$reps" -t "$threads" -o csv \
      -sm tensor --rpc "$rpc" --device "$devices" "${@:2}" |
    python3 -c 'import csv, sys; print(list(csv.DictReader(sys.stdin))[-1]["avg_ts"])'
}
echo "## -sm tensor over 2 rpc-servers x 1 device (-t $threads each), $rounds interleaved rounds (-r $reps)"
echo "## round: pp512 servers client ratio | tg128 servers client ratio"
for run in $(seq "$rounds"); do
  ps=$(ts servers -p 512 -n 0) pc=$(ts client -p 512 -n 0)
  gs=$(ts servers -p 0 -n 128) gc=$(ts client -p 0 -n 128)
  awk -v r="$run" -v ps="$ps" -v pc="$pc" -v gs="$gs" -v gc="$gc" 'BEGIN {
    printf "%d pp512 %.1f %.1f %.3fx tg128 %.1f %.1f %.3fx\n", r, ps, pc, ps / pc, gs, gc, gs / gc }'
done | tee "$work/rounds"
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { awk -v c="$1" '{ print $c + 0 }' "$work/rounds" | median; }
echo "medians: pp512 servers $(col 3) client $(col 4) ratio $(col 5)x | tg128 servers $(col 7) client $(col 8) ratio $(col 9)x"
uptime
