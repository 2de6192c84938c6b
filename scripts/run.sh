#!/usr/bin/env bash
# The main job from a fresh checkout: installs what building and running need, builds the
# programs (rpc-server, tg-run, tg-bench, tg-gguf, tg-ops, tg-server; not the tests: test.sh
# builds those), then:
#   - with no arguments, the demo: two rpc-servers on loopback (two devices each: the GPUs,
#     else two virtual CPU devices), the real tiny model demo/stories260K.gguf split over
#     their four devices (-sm tensor), the per-device load report and the greedy text; the
#     servers are stopped at the end;
#   - with arguments, tg-run with them, e.g.
#       bash scripts/run.sh -m ~/models/qwen2.5-0.5b-instruct-q8_0.gguf -p "The capital of France is" -n 32
# A second run starts in seconds (nothing to build). TG_SKIP_APT=1 skips the package check.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
esac
bash scripts/install-deps.sh
build=build/release
programs=(rpc-server tg-run tg-bench tg-gguf tg-ops tg-server)
# A build folder configured before (by scripts/test.sh, with the tests) is kept as it is.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake --preset release -DTG_BUILD_TESTS=OFF -DTG_BUILD_BENCH=OFF >/dev/null
fi
cmake --build --preset release -j "$(nproc)" --target "${programs[@]}"
if [ $# -gt 0 ]; then
  exec "./$build/tools/tg-run/tg-run" "$@"
fi

# The demo: the main job of tensorgrid, a model split over rpc-servers.
model=demo/stories260K.gguf
work=$(mktemp -d)
pids=()
stop_servers() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap stop_servers EXIT
endpoints=()
for i in 1 2; do
  # Port 0: the kernel picks a free one and the server writes it to its --port-file.
  TG_CPU_DEVICES=2 "./$build/server/rpc-server" -H 127.0.0.1 -p 0 --port-file "$work/port$i" \
      -t 1 >"$work/server$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2; do
  for _ in $(seq 100); do
    [ -s "$work/port$i" ] && break
    kill -0 "${pids[$((i - 1))]}" 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -s "$work/port$i" ]; then
    echo "run.sh: rpc-server $i did not start:" >&2
    cat "$work/server$i.log" >&2
    exit 1
  fi
  endpoints+=("127.0.0.1:$(cat "$work/port$i")")
done
rpc=$(IFS=,; echo "${endpoints[*]}")
echo "run.sh: two rpc-servers (pids ${pids[*]}) on $rpc; $model split over their devices (-sm tensor)"
echo "run.sh: ./$build/tools/tg-run/tg-run -m $model --rpc $rpc -sm tensor -v -p \"Once upon a time\" -n 64 --temp 0"
"./$build/tools/tg-run/tg-run" -m "$model" --rpc "$rpc" -sm tensor -v -t 1 \
    -p "Once upon a time" -n 64 --temp 0
echo "run.sh: done; the servers are stopped. With your own GGUF: bash scripts/run.sh -m MODEL.gguf -p \"...\""
