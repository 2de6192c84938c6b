#!/usr/bin/env bash
# -sm layer benchmarks over rpc-servers for docs/benchmarks.md, side by side in one run:
#   layer  two rpc-servers on loopback (-t 1 each), the model's layers split between them:
#          tg-bench against llama.cpp's rpc-server with llama-bench -sm layer, pp512 and
#          tg128, stories260K and the synthetic 15M-shape Q8_0 model, in ROUNDS interleaved
#          rounds (ours, then llama.cpp's, per model); medians at the end;
#   devs   two devices of one rpc-server (TG_CPU_DEVICES=2 rpc-server -d 0,1 -t 1) against
#          one device of it: pp512 with -sm layer --n-copies 4 (pipelined) and 1, and
#          -sm none on device 0; the same two and one devices in the client's own process
#          (TG_CPU_DEVICES=2, -t 1), which is what overlapping two computes on this host
#          can give at most; ROUNDS interleaved rounds, medians.
#          With BASE=DIR (another build's build/release, e.g. of main), its rpc-server and
#          tg-bench run in the same rounds too (a "before" column).
# Usage: bash scripts/bench_rpc_layer.sh [layer|devs|all] [ROUNDS] [REPS]
#   LLAMA_BIN (required): the bin folder of a llama.cpp build with -DGGML_RPC=ON (its
#   rpc-server and llama-bench; docs/benchmarks.md says how). build/release must be built.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
rounds=${2:-3}
reps=${3:-3}
bin=build/release
llama=${LLAMA_BIN:?set LLAMA_BIN to the bin folder of a llama.cpp build with -DGGML_RPC=ON}
m260k=demo/stories260K.gguf
m15m=${TG_BENCH_MODEL:-/tmp/tg-bench-layer-15m-q8_0.gguf}
[ -f "$m15m" ] || $bin/tools/tg-gguf/tg-gguf synth "$m15m" --dims 288,768,6,6,6,32000 --type q8_0 >/dev/null
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
# Starts `$@` in the background, remembering its pid for cleanup.
spawn() { "$@" >>"$work/servers.log" 2>&1 & pids+=($!); }
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# --no-split-probe: the split-overhead probe costs seconds over rpc-servers and is not in
# avg_ts (a BASE from before 2026-11-29 lacks the flag, and runs the probe).
ours_ts() { $bin/tools/tg-bench/tg-bench -r "$reps" -t 1 -o csv --no-split-probe "$@" 2>/dev/null | tail -n 1 | cut -d, -f13; }
base_ts() { "$BASE"/tools/tg-bench/tg-bench -r "$reps" -t 1 -o csv "$@" 2>/dev/null | tail -n 1 | cut -d, -f13; }
# llama-bench's csv: avg_ts is the column named avg_ts.
llama_ts() {
  LD_LIBRARY_PATH=$llama "$llama"/llama-bench -r "$reps" -t 1 -o csv "$@" 2>/dev/null |
    python3 -c 'import csv, sys; rows = list(csv.DictReader(sys.stdin)); print(rows[-1]["avg_ts"])'
}

if [ "$what" = layer ] || [ "$what" = all ]; then
  a=$(free_port); spawn $bin/server/rpc-server -p "$a" -t 1; wait_port "$a"
  b=$(free_port); spawn $bin/server/rpc-server -p "$b" -t 1; wait_port "$b"
  la=$(free_port); spawn env LD_LIBRARY_PATH="$llama" "$llama"/ggml-rpc-server -p "$la" -t 1; wait_port "$la"
  lb=$(free_port); spawn env LD_LIBRARY_PATH="$llama" "$llama"/ggml-rpc-server -p "$lb" -t 1; wait_port "$lb"
  ea=127.0.0.1:$a eb=127.0.0.1:$b
  ours=(--rpc "$ea,$eb" -sm layer --device "RPC[$ea]/0,RPC[$eb]/0")
  if [ -n "${BASE:-}" ]; then
    c=$(free_port); spawn "$BASE"/server/rpc-server -p "$c" -t 1; wait_port "$c"
    d=$(free_port); spawn "$BASE"/server/rpc-server -p "$d" -t 1; wait_port "$d"
    ec=127.0.0.1:$c ed=127.0.0.1:$d
    base=(--rpc "$ec,$ed" -sm layer --device "RPC[$ec]/0,RPC[$ed]/0")
  fi
  theirs=(-rpc "127.0.0.1:$la,127.0.0.1:$lb" -sm layer -ngl 99)
  echo "## -sm layer over two rpc-servers (-t 1 each), $rounds rounds, t/s: ours llama.cpp [base] (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for run in $(seq "$rounds"); do
    for m in "$m260k" "$m15m"; do
      name=$(basename "$m" .gguf)
      op=$(ours_ts -m "$m" -p 512 -n 0 "${ours[@]}"); lp=$(llama_ts -m "$m" -p 512 -n 0 "${theirs[@]}")
      ot=$(ours_ts -m "$m" -p 0 -n 128 "${ours[@]}"); lt=$(llama_ts -m "$m" -p 0 -n 128 "${theirs[@]}")
      bp=- bt=-
      if [ -n "${BASE:-}" ]; then
        bp=$(base_ts -m "$m" -p 512 -n 0 "${base[@]}"); bt=$(base_ts -m "$m" -p 0 -n 128 "${base[@]}")
      fi
      echo "$name pp512 $op $lp tg128 $ot $lt base $bp $bt"
    done
  done | tee "$work/layer"
  for m in "$m260k" "$m15m"; do
    name=$(basename "$m" .gguf)
    grep "^$name " "$work/layer" > "$work/one" || continue
    echo "median $name: pp512 $(awk '{print $3}' "$work/one" | median) vs $(awk '{print $4}' "$work/one" | median)," \
         "tg128 $(awk '{print $6}' "$work/one" | median) vs $(awk '{print $7}' "$work/one" | median)," \
         "base pp512 $(awk '{print $9}' "$work/one" | median) tg128 $(awk '{print $10}' "$work/one" | median)"
  done
  echo "(load after: $(cut -d' ' -f1-3 /proc/loadavg))"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=()
fi

if [ "$what" = devs ] || [ "$what" = all ]; then
  p=$(free_port); spawn env TG_CPU_DEVICES=2 $bin/server/rpc-server -p "$p" -d 0,1 -t 1; wait_port "$p"
  e=127.0.0.1:$p
  if [ -n "${BASE:-}" ]; then
    q=$(free_port); spawn env TG_CPU_DEVICES=2 "$BASE"/server/rpc-server -p "$q" -d 0,1 -t 1; wait_port "$q"
    f=127.0.0.1:$q
  fi
  echo "## pp512 on one rpc-server: two devices (-sm layer) vs one, $rounds rounds, t/s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for run in $(seq "$rounds"); do
    two4=$(ours_ts -m "$m15m" -p 512 -n 0 --rpc "$e" -sm layer --device "RPC[$e]/0,RPC[$e]/1" --n-copies 4)
    two1=$(ours_ts -m "$m15m" -p 512 -n 0 --rpc "$e" -sm layer --device "RPC[$e]/0,RPC[$e]/1" --n-copies 1)
    one=$(ours_ts -m "$m15m" -p 512 -n 0 --rpc "$e" --device "RPC[$e]/0")
    base4=-
    if [ -n "${BASE:-}" ]; then
      base4=$(base_ts -m "$m15m" -p 512 -n 0 --rpc "$f" -sm layer --device "RPC[$f]/0,RPC[$f]/1" --n-copies 4)
    fi
    local4=$(TG_CPU_DEVICES=2 ours_ts -m "$m15m" -p 512 -n 0 -sm layer --device CPU0,CPU1 --n-copies 4)
    local1=$(TG_CPU_DEVICES=2 ours_ts -m "$m15m" -p 512 -n 0 --device CPU0)
    echo "two-devices-pipe4 $two4 two-devices-pipe1 $two1 one-device $one base-two-devices-pipe4 $base4" \
         "local-two-pipe4 $local4 local-one $local1"
  done | tee "$work/devs"
  echo "median: two devices --n-copies 4 $(awk '{print $2}' "$work/devs" | median)," \
       "--n-copies 1 $(awk '{print $4}' "$work/devs" | median), one device $(awk '{print $6}' "$work/devs" | median)," \
       "base two devices --n-copies 4 $(awk '{print $8}' "$work/devs" | median);" \
       "in-process: two devices --n-copies 4 $(awk '{print $10}' "$work/devs" | median)," \
       "one device $(awk '{print $12}' "$work/devs" | median)"
  echo "(load after: $(cut -d' ' -f1-3 /proc/loadavg))"
fi
