#!/usr/bin/env bash
# RPC benchmarks for docs/benchmarks.md, side by side in one run:
#   1. tg-bench pp512/tg128 of the synthetic 15M-shape Q8_0 model locally and through one
#      rpc-server on loopback (same thread count on both sides); tg128 three ways: reading the
#      logits every step (llama-bench's way), greedy on the device (--greedy, tg-run --temp 0:
#      steps queued ahead in batches sized by the session) and greedy one step per message
#      (--greedy-batch 1); tg128 sampled on the device (--temp 0.8, tg-run --temp 0.8: SAMPLE,
#      queued ahead like greedy); pp512, greedy and sampled tg128 again in ROUNDS short
#      interleaved rounds, with the median ratios; then greedy tg128 with the server on a core
#      of its own (taskset, -t 1);
#   2. rpc_bench: session round trip, upload MB/s against a plain gRPC byte stream;
#   3. model load time: local, over RPC with a cold cache, over RPC with a warm cache.
# Usage: bash scripts/bench_rpc.sh [THREADS] [REPS] [ROUNDS] [rounds]   (build/release must be
# built; a fourth argument "rounds" runs only the interleaved rounds of 1.)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
reps=${2:-5}
rounds=${3:-12}
only=${4:-all}
bin=build/release
model=${TG_BENCH_MODEL:-/tmp/tg-bench-15m-q8_0.gguf}
[ -f "$model" ] || $bin/tools/tg-gguf/tg-gguf synth "$model" --dims 288,768,6,6,6,32000 --type q8_0 >/dev/null
pin=""  # a taskset prefix for the server.
work=$(mktemp -d)
trap 'kill $(cat "$work"/pid 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

start_server() {
  $pin $bin/server/rpc-server -p 0 --port-file "$work/port" -t "$threads" --cache "$work/cache" \
      --metrics-port 0 >"$work/server.log" 2>&1 &
  echo $! >"$work/pid"
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
  endpoint=127.0.0.1:$(cat "$work/port")
}
stop_server() { kill "$(cat "$work/pid")"; wait "$(cat "$work/pid")" 2>/dev/null || true; rm -f "$work/port"; }

echo "## tg-bench, local vs one rpc-server on loopback ($threads threads each)"
start_server
for run in $([ "$only" = rounds ] || echo 1 2); do  # local and remote interleaved, twice: the machine's speed drifts.
  $bin/tools/tg-bench/tg-bench -m "$model" -p 512 -n 128 -r "$reps" -t "$threads" |
    tail -n $([ $run = 1 ] && echo 4 || echo 2)  # the table's header once.
  $bin/tools/tg-bench/tg-bench -m "$model" -p 512 -n 128 -r "$reps" -t "$threads" --rpc "$endpoint" | tail -n 2
  $bin/tools/tg-bench/tg-bench -m "$model" -p 0 -n 128 -r "$reps" -t "$threads" --greedy | tail -n 1
  $bin/tools/tg-bench/tg-bench -m "$model" -p 0 -n 128 -r "$reps" -t "$threads" --greedy --rpc "$endpoint" | tail -n 1
  $bin/tools/tg-bench/tg-bench -m "$model" -p 0 -n 128 -r "$reps" -t "$threads" --greedy --greedy-batch 1 \
      --rpc "$endpoint" | tail -n 1 | sed 's/greedy/greedy, --greedy-batch 1/'
  $bin/tools/tg-bench/tg-bench -m "$model" -p 0 -n 128 -r "$reps" -t "$threads" --temp 0.8 | tail -n 1
  $bin/tools/tg-bench/tg-bench -m "$model" -p 0 -n 128 -r "$reps" -t "$threads" --temp 0.8 --rpc "$endpoint" | tail -n 1
done

# pp512, greedy and sampled tg128 again, in many short interleaved rounds: the VM's speed
# changes within seconds, so the ratio of two neighbouring runs is noisy; the median over
# rounds is not.
echo; echo "## pp512, tg128 greedy and tg128 --temp 0.8, $rounds interleaved rounds (-r 3): local, rpc-server, ratio"
ts() { $bin/tools/tg-bench/tg-bench -m "$model" -r 3 -t "$threads" -o csv "$@" | tail -n 1 | cut -d, -f13; }
for run in $(seq "$rounds"); do
  pl=$(ts -p 512 -n 0) pr=$(ts -p 512 -n 0 --rpc "$endpoint")
  tl=$(ts -p 0 -n 128 --greedy) tr=$(ts -p 0 -n 128 --greedy --rpc "$endpoint")
  sl=$(ts -p 0 -n 128 --temp 0.8) sr=$(ts -p 0 -n 128 --temp 0.8 --rpc "$endpoint")
  awk -v pl="$pl" -v pr="$pr" -v tl="$tl" -v tr="$tr" -v sl="$sl" -v sr="$sr" 'BEGIN {
    printf "pp512 %.0f %.0f %.3fx   tg128 greedy %.0f %.0f %.3fx   tg128 temp 0.8 %.0f %.0f %.3fx\n",
      pl, pr, pr / pl, tl, tr, tr / tl, sl, sr, sr / sl }'
done | tee "$work/rounds"
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3fx", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "median ratio: pp512 $(awk '{ print $4 + 0 }' "$work/rounds" | median), tg128 greedy $(awk '{ print $9 + 0 }' "$work/rounds" | median), tg128 temp 0.8 $(awk '{ print $15 + 0 }' "$work/rounds" | median)"
stop_server
[ "$only" = rounds ] && exit 0

# The same greedy tg with the server on a core the client does not use (as on a GPU host):
# -t 1 on both sides, the server and the local run on CPU 1, the client on CPU 0.
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  echo; echo "## tg128 greedy, the server on a core of its own (-t 1; server and local run on CPU 1, client on CPU 0)"
  saved_threads=$threads threads=1 pin="taskset -c 1"
  start_server
  for run in 1 2 3; do
    taskset -c 1 $bin/tools/tg-bench/tg-bench -m "$model" -p 0 -n 128 -r "$reps" -t 1 --greedy | tail -n 1
    taskset -c 0 $bin/tools/tg-bench/tg-bench -m "$model" -p 0 -n 128 -r "$reps" -t 1 --greedy --rpc "$endpoint" | tail -n 1
  done
  stop_server
  threads=$saved_threads pin=""
fi

echo; echo "## rpc_bench"
$bin/bench/rpc_bench --mb 256 --round-trips 5000

echo; echo "## load time (tg-run -n 1, wall seconds)"
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); awk -v s="$s" -v e="$e" "BEGIN{printf \"%.2f\", e - s}"; }
echo "local:           $(t $bin/tools/tg-run/tg-run -m "$model" -n 1 -t "$threads")"
rm -rf "$work/cache"
start_server
echo "rpc, cold cache: $(t $bin/tools/tg-run/tg-run -m "$model" -n 1 -t "$threads" --rpc "$endpoint")"
stop_server
start_server
echo "rpc, warm cache: $(t $bin/tools/tg-run/tg-run -m "$model" -n 1 -t "$threads" --rpc "$endpoint") (server restarted on the same --cache)"
stop_server
