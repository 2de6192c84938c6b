#!/bin/sh
# rpc_server_log_test.sh RPC_SERVER: the real binary's log lines on stderr: at the default
# level the "listening on" line (with its key=value fields) and the shutdown line; nothing at
# --log-level warn; a bad --log-level is one error line and exit code 2.
set -u
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  echo "--- stderr:"
  cat "$dir/err"
  exit 1
}

# Starts the server with extra flags, waits for its port file, stops it with SIGTERM.
serve() {
  rm -f "$dir/port"
  "$bin" -p 0 --port-file "$dir/port" -t 1 "$@" 2>"$dir/err" &
  pid=$!
  tries=0
  while [ ! -s "$dir/port" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then fail "rpc-server $* exited before listening"; fi
    tries=$((tries + 1))
    if [ "$tries" -gt 600 ]; then
      kill -KILL "$pid"
      fail "rpc-server $* did not listen in 30 s"
    fi
    sleep 0.05
  done
  kill -TERM "$pid"
  wait "$pid" || fail "rpc-server $* exited $? after SIGTERM"
}

serve
port=$(cat "$dir/port")
grep -q -x "rpc-server: listening on 127\.0\.0\.1:$port devices=[^ ]* cache=off tls=off token=off .*" \
  "$dir/err" || fail "no listening line for port $port"
grep -q -x "rpc-server: shutting down signal=SIGTERM" "$dir/err" || fail "no shutdown line"

serve --log-level warn
[ -s "$dir/err" ] && fail "--log-level warn still wrote lines"

"$bin" --log-level loud 2>"$dir/err" && fail "--log-level loud was accepted"
[ "$(cat "$dir/err")" = "rpc-server: error: --log-level: log level 'loud' is not one of error, warn, info, debug" ] ||
  fail "unexpected error line for --log-level loud"
echo "rpc_server_log_test: ok"
