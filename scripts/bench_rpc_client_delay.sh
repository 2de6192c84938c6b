#!/usr/bin/env bash
# A client far from its servers (docs/benchmarks.md, "A client far from its servers"): two
# one-thread rpc-servers on loopback, every packet to and from their gRPC ports held DELAY_MS
# by tests/faults/delayq.py (iptables NFQUEUE; the servers' peer links, which carry the
# all-reduce pieces, have ports of their own and stay undelayed), and a client with 2
# threads. Each round decodes tg64 twice on one remote device and on a tensor split over
# both servers: with a token from the host at every step (tg-bench's default: one round
# trip a token) and with --greedy (the device's picks fed back, steps queued ahead).
#
#   sudo bash scripts/bench_rpc_client_delay.sh MODEL [delay_ms=5] [rounds=3]
# Needs root (iptables) and nfnetlink_queue; adds its own OUTPUT rules and removes them.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench_rpc_client_delay.sh MODEL [delay_ms] [rounds]}
delay=${2:-5}
rounds=${3:-3}
bin=build/release
queue=7
work=$(mktemp -d)
rules=()
cleanup() {
  kill $(cat "$work"/pid* 2>/dev/null) 2>/dev/null || true
  for r in "${rules[@]}"; do
    # shellcheck disable=SC2086
    iptables -D OUTPUT $r 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

endpoints=""
for i in 1 2; do
  "$bin/server/rpc-server" -p 0 --port-file "$work/port$i" -t 1 >"$work/server$i.log" 2>&1 &
  echo $! >"$work/pid$i"
  for _ in $(seq 200); do [ -s "$work/port$i" ] && break; sleep 0.05; done
  port=$(cat "$work/port$i")
  endpoints+="${endpoints:+,}127.0.0.1:$port"
  for dir in --dport --sport; do
    rule="-o lo -p tcp $dir $port -j NFQUEUE --queue-num $queue"
    # shellcheck disable=SC2086
    iptables -A OUTPUT $rule
    rules+=("$rule")
  done
done
python3 tests/faults/delayq.py --queue "$queue" --delay-ms "$delay" >"$work/delayq.log" 2>&1 &
echo $! >"$work/pid_delayq"
for _ in $(seq 100); do grep -q ready "$work/delayq.log" && break; sleep 0.05; done
grep -q ready "$work/delayq.log" || { cat "$work/delayq.log"; exit 1; }

first=${endpoints%%,*}
tg() {  # tg SPLIT_FLAGS... : t/s of tg64 with the host's tokens, then with --greedy.
  local out
  for greedy in "" --greedy; do
    # shellcheck disable=SC2086
    out=$("$bin/tools/tg-bench/tg-bench" -m "$model" -t 2 --rpc "$endpoints" "$@" $greedy \
      -p 0 -n 64 -r 2 -o csv 2>/dev/null)
    printf ' %s' "$(python3 -c 'import csv,sys; print(list(csv.DictReader(sys.stdin))[-1]["avg_ts"][:7])' <<<"$out")"
  done
}
echo "## $delay ms each way between the client and the servers; tg64 t/s: host tokens, --greedy"
for r in $(seq "$rounds"); do
  echo "round $r: one device$(tg -sm none --device "RPC[$first]/0") | -sm tensor$(tg -sm tensor)"
done
