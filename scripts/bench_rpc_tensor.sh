#!/usr/bin/env bash
# -sm tensor against -sm layer over the same rpc-servers (docs/benchmarks.md, "-sm tensor over
# two rpc-servers"): SERVERS one-thread rpc-servers on loopback, a client with 2 threads, and
# the same model decoded locally with 2 threads; tg128 in ROUNDS interleaved rounds, each line
# with tg-bench's compute and transfer shares (under -sm tensor: the servers' own compute,
# and the rest of each step: collectives and latency).
#
#   bash scripts/bench_rpc_tensor.sh MODEL [rounds=3] [servers=2] [reps=2]
# SERVER_FLAGS adds rpc-server flags (SERVER_FLAGS="--peer-link-port off": the all-reduce
# pieces over gRPC streams only). LLAMA_BIN (optional): the bin folder of a llama.cpp build
# with -DGGML_RPC=ON; then as many of its rpc-servers (-t 1) run beside ours and each round
# adds llama-bench -sm tensor and -sm layer over them (-ngl 99, client -t 2).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench_rpc_tensor.sh MODEL [rounds] [servers] [reps]}
rounds=${2:-3}
servers=${3:-2}
reps=${4:-2}
bin=build/release
work=$(mktemp -d)
trap 'kill $(cat "$work"/pid* 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

endpoints=""
for i in $(seq "$servers"); do
  # shellcheck disable=SC2086
  "$bin/server/rpc-server" -p 0 --port-file "$work/port$i" -t 1 --cache "$work/cache$i" \
    ${SERVER_FLAGS:-} >"$work/server$i.log" 2>&1 &
  echo $! >"$work/pid$i"
  for _ in $(seq 200); do [ -s "$work/port$i" ] && break; sleep 0.05; done
  endpoints+="${endpoints:+,}127.0.0.1:$(cat "$work/port$i")"
done

run() {  # label, tg-bench flags...
  local label=$1
  shift
  "$bin/tools/tg-bench/tg-bench" -m "$model" -p 0 -n 128 -t 2 -r "$reps" "$@" 2>&1 |
    awk -F'|' -v label="$label" '/tg128/ {printf "%-8s %s t/s  compute %s  transfer %s\n", label, $10, $11, $12}'
}
llama_endpoints=""
if [ -n "${LLAMA_BIN:-}" ]; then
  for i in $(seq "$servers"); do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/ggml-rpc-server" -p "$port" -t 1 >"$work/llama$i.log" 2>&1 &
    echo $! >"$work/pid_llama$i"
    for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
    llama_endpoints+="${llama_endpoints:+,}127.0.0.1:$port"
  done
fi
llama_run() {  # label, llama-bench flags...
  local label=$1
  shift
  LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/llama-bench" -m "$model" -p 0 -n 128 -t 2 -r "$reps" \
    -ngl 99 -rpc "$llama_endpoints" "$@" 2>/dev/null |
    awk -F'|' -v label="$label" '/tg128/ {printf "%-8s %s t/s\n", label, $(NF - 1)}'
}
for r in $(seq "$rounds"); do
  echo "== round $r, load $(cut -d' ' -f1-3 /proc/loadavg)"
  run local
  run tensor --rpc "$endpoints" -sm tensor
  run layer --rpc "$endpoints" -sm layer
  if [ -n "$llama_endpoints" ]; then
    llama_run l.tensor -sm tensor
    llama_run l.layer -sm layer
  fi
done
