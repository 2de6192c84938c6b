#!/usr/bin/env bash
# Model load time for docs/benchmarks.md (issue 16), side by side in one run: the synthetic
# 1B-shape Q4_0 model (tg-gguf synth --dims 2048,5632,22,32,4,32000 --type q4_0, 620 MB)
# onto one rpc-server on loopback, tensorgrid and llama.cpp's rpc-server in the same cases,
# ROUNDS interleaved rounds (the machine's speed drifts), medians:
#   local             no server;
#   upload            a server without a cache (llama.cpp: rpc-server without -c);
#   cache, cold       a server with an empty cache (-c): the bytes are sent and stored;
#   cache, warm       the same server again: the bytes come from its cache;
#   after a restart   a new server on the same cache;
#   --model-dir       (tensorgrid only) the server has the file: it reads it from its disk;
# the cache and --model-dir cases with and without a .tghash sidecar (tg-gguf hash), i.e.
# with and without hashing on the client. Each case is a one-token run (tg-run -n 1,
# llama-bench -p 0 -n 1 -r 1): its wall time, and for tensorgrid also the weights' load time
# (tg-run -v). In the same rounds: rpc_bench's plain gRPC byte stream (the yardstick of an
# upload) and the time to read the file from the page cache (dd, 4 MiB blocks; and, for
# reference, into one fresh buffer of the file's size).
# Usage: bash scripts/bench_load.sh [ROUNDS] [THREADS]
#   build/release must be built (tg-run, tg-gguf, rpc-server, rpc_bench); LLAMA_BIN names a
#   llama.cpp build's bin/ with ggml-rpc-server and llama-bench (built with -DGGML_RPC=ON;
#   its columns stay empty without it); TG_BENCH_1B the model (written when missing: > 1 min).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-2}
bin=build/release
llama=${LLAMA_BIN:-}
model=${TG_BENCH_1B:-/tmp/tg-bench-1b-q4_0.gguf}
[ -f "$model" ] || $bin/tools/tg-gguf/tg-gguf synth "$model" --dims 2048,5632,22,32,4,32000 --type q4_0
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  cp "$work/results" /tmp/bench_load_results.txt 2>/dev/null || true  # even after a failure.
  rm -rf "$work"
}
trap cleanup EXIT
# The client's two views of the model (hard links: the same bytes and mtime), one with a
# sidecar; and the server's --model-dir with a copy of its own.
mkdir -p "$work/plain" "$work/sidecar" "$work/models"
ln "$model" "$work/plain/m.gguf" 2>/dev/null || cp "$model" "$work/plain/m.gguf"
ln "$work/plain/m.gguf" "$work/sidecar/m.gguf"
cp "$model" "$work/models/m.gguf"
$bin/tools/tg-gguf/tg-gguf hash "$work/sidecar/m.gguf"
cat "$model" "$work/models/m.gguf" >/dev/null  # both in the page cache.

now() { date +%s.%N; }
# tg NAME MODEL ARGS...: one tg-run; records the wall time and the weights' load time.
tg() {
  local name=$1 m=$2; shift 2
  local s e out
  s=$(now); out=$($bin/tools/tg-run/tg-run -m "$m" -n 1 -p "" -t "$threads" -v "$@" 2>&1 >/dev/null); e=$(now)
  echo "$name tg_wall $(awk -v s="$s" -v e="$e" 'BEGIN { print e - s }')" >>"$work/results"
  echo "$name tg_load $(printf '%s\n' "$out" | sed -n 's/.*load: all weights in \([0-9.]*\) s.*/\1/p')" >>"$work/results"
}
# peer NAME ARGS...: one llama-bench run's wall time.
peer() {
  [ -n "$llama" ] || return 0
  local name=$1 s e; shift
  s=$(now); "$llama/llama-bench" -m "$model" -p 0 -n 1 -r 1 -t "$threads" "$@" >/dev/null 2>&1; e=$(now)
  echo "$name peer_wall $(awk -v s="$s" -v e="$e" 'BEGIN { print e - s }')" >>"$work/results"
}
# tg_server NAME ARGS...: starts rpc-server, sets $endpoint.
tg_server() {
  local name=$1; shift
  rm -f "$work/port.$name"
  $bin/server/rpc-server -p 0 --port-file "$work/port.$name" -t "$threads" "$@" >>"$work/server.$name.log" 2>&1 &
  pids+=($!); eval "pid_$name=$!"
  for _ in $(seq 200); do [ -s "$work/port.$name" ] && break; sleep 0.05; done
  endpoint=127.0.0.1:$(cat "$work/port.$name")
}
# peer_server NAME PORT ARGS...: starts llama.cpp's rpc-server.
peer_server() {
  local name=$1 port=$2; shift 2
  "$llama/ggml-rpc-server" -p "$port" -t "$threads" "$@" >>"$work/peer.$name.log" 2>&1 &
  pids+=($!); eval "pid_$name=$!"
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
}
stop() { local p; p=$(eval echo "\$pid_$1"); kill "$p"; wait "$p" 2>/dev/null || true; }
wait_indexed() { for _ in $(seq 600); do grep -q "index ready" "$work/server.$1.log" && return; sleep 0.1; done; }

bytes=$(stat -c %s "$model")
for round in $(seq "$rounds"); do
  echo "round $round of $rounds" >&2
  echo "round$round loadavg $(cut -d' ' -f1 /proc/loadavg)" >>"$work/results"
  # Yardsticks.
  dd if="$model" of=/dev/null bs=4M 2>&1 | sed -n 's/.*copied, \([0-9.]*\) s.*/read page_cache \1/p' >>"$work/results"
  # The same read into one buffer of the file's size: fresh memory, faulted in page by page
  # as the copy lands, as a load into a new server buffer is.
  dd if="$model" of=/dev/null bs="$bytes" count=1 iflag=fullblock 2>&1 |
    sed -n 's/.*copied, \([0-9.]*\) s.*/read fresh_memory \1/p' >>"$work/results"
  # rpc_bench failing (it did, twice, on an overloaded machine) costs this round's figure only.
  { $bin/bench/rpc_bench --mb 512 --round-trips 10 2>"$work/rpc_bench.err" || cat "$work/rpc_bench.err" >&2; } |
    sed -n 's/plain gRPC byte stream: \([0-9]*\) MB\/s (1 stream), \([0-9]*\) MB\/s.*/\1 \2/p' |
    awk '{ print "plain stream_mb_s", ($1 > $2 ? $1 : $2) }' >>"$work/results"
  # tensorgrid.
  tg local "$work/plain/m.gguf"
  tg_server up; tg upload "$work/plain/m.gguf" --rpc "$endpoint"; stop up
  rm -rf "$work/cache"
  tg_server cache --cache "$work/cache"
  tg cache_cold "$work/plain/m.gguf" --rpc "$endpoint"
  tg cache_warm "$work/plain/m.gguf" --rpc "$endpoint"
  tg cache_warm_sidecar "$work/sidecar/m.gguf" --rpc "$endpoint"
  stop cache
  tg_server cache --cache "$work/cache"
  tg restart "$work/plain/m.gguf" --rpc "$endpoint"
  stop cache
  rm -rf "$work/cache"
  tg_server cache --cache "$work/cache"
  tg cache_cold_sidecar "$work/sidecar/m.gguf" --rpc "$endpoint"
  stop cache
  tg_server md --model-dir "$work/models"; wait_indexed md
  tg model_dir "$work/plain/m.gguf" --rpc "$endpoint"
  tg model_dir_sidecar "$work/sidecar/m.gguf" --rpc "$endpoint"
  stop md
  # llama.cpp.
  if [ -n "$llama" ]; then
    port=$((51000 + round * 10))
    peer local
    peer_server up $port; peer upload --rpc 127.0.0.1:$port; stop up
    rm -rf "$work/llama-cache"
    LLAMA_CACHE="$work/llama-cache" peer_server cache $((port + 1)) -c
    peer cache_cold --rpc 127.0.0.1:$((port + 1))
    peer cache_warm --rpc 127.0.0.1:$((port + 1))
    stop cache
    LLAMA_CACHE="$work/llama-cache" peer_server cache $((port + 2)) -c
    peer restart --rpc 127.0.0.1:$((port + 2))
    stop cache
  fi
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
get() { awk -v n="$1" -v k="$2" '$1 == n && $2 == k && $3 != "" { print $3 }' "$work/results" | median; }
echo
echo "model: $model ($((bytes / 1000000)) MB), $rounds rounds, -t $threads, medians (seconds);" \
  "load average at each round's start: $(awk '$2 == "loadavg" { printf "%s ", $3 }' "$work/results")"
echo
echo "| case | tensorgrid: one-token run | tensorgrid: weights load | llama.cpp: one-token run |"
echo "|---|---|---|---|"
for c in local upload cache_cold cache_cold_sidecar cache_warm cache_warm_sidecar restart model_dir model_dir_sidecar; do
  # llama.cpp has no sidecar and no --model-dir: its column repeats the case without them.
  case $c in
    model_dir*) pw="(no such case)" ;;
    *_sidecar) pw="(as ${c%_sidecar})" ;;
    *) pw=$(get "$c" peer_wall) ;;
  esac
  echo "| $c | $(get "$c" tg_wall) | $(get "$c" tg_load) | $pw |"
done
read_s=$(get read page_cache)
fresh_s=$(get read fresh_memory)
plain=$(get plain stream_mb_s)
echo
echo "page-cache read of the file: $read_s s (into fresh memory: $fresh_s s); rpc_bench plain gRPC stream: $plain MB/s"
awk -v b="$bytes" -v up="$(get upload tg_load)" -v plain="$plain" -v rd="$read_s" \
    -v warm="$(get cache_warm_sidecar tg_load)" -v md="$(get model_dir_sidecar tg_load)" \
    -v warm_ns="$(get cache_warm tg_load)" -v md_ns="$(get model_dir tg_load)" 'BEGIN {
  printf "cold upload: %.0f MB/s = %.2fx the plain stream (goal >= 0.9x)\n", b / 1e6 / up, b / 1e6 / up / plain
  printf "warm cache: %.2fx the page-cache read with a sidecar, %.2fx without (goal >= 0.8x)\n", rd / warm, rd / warm_ns
  printf "--model-dir: %.2fx the page-cache read with a sidecar, %.2fx without (goal >= 0.8x)\n", rd / md, rd / md_ns
}'
cp "$work/results" /tmp/bench_load_results.txt
echo "raw results: /tmp/bench_load_results.txt"
