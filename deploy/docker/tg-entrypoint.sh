#!/usr/bin/env bash
# tg-entrypoint: the images' entrypoint. It turns TG_* environment variables into flags, so a
# compose file and a Kubernetes manifest configure the containers the same way, and finds
# the servers of a cluster for the client tools.
#
#   tg-entrypoint rpc-server [ARGS]      serve this container's devices (the default command)
#   tg-entrypoint tg-run|tg-bench [ARGS] a client tool with --rpc (and TLS, token) filled in
#   tg-entrypoint health                 the HEALTHCHECK: grpc.health.v1 of the local server
#   tg-entrypoint rpc-list               print the --rpc list the client tools would get
#   tg-entrypoint OTHER [ARGS]           run OTHER as is (tg-gguf, bash, ...)
#
# Server: TG_HOST (0.0.0.0), TG_PORT (50052), TG_TLS_DIR (a folder holding this server's
#   certificate and key: <name>.crt/.key for the replica's name, e.g. rpc-server-1 or the pod
#   name, or TG_REPLICA_NAME when set, else tls.crt/tls.key; ca.crt there also verifies other
#   servers on peer copies),
#   TG_TOKEN_FILE, TG_METRICS_PORT, TG_HEALTH_PORT, TG_CACHE_DIR, TG_CACHE_MAX_GB,
#   TG_GPU_COUNT (serve GPUs 0..N-1), TG_INSECURE=1 (no TLS on a public bind).
# Both: TG_CA_FILE, the CA servers are verified with (default: TG_TLS_DIR/ca.crt when there).
# Client: TG_RPC (host:port,... as is) or TG_RPC_SERVICE (a DNS name) with TG_RPC_PORT
#   (50052): with TG_RPC_REPLICAS=N (a Kubernetes StatefulSet TG_RPC_STATEFULSET behind the
#   headless Service TG_RPC_SERVICE) the names are <set>-0.<service> .. <set>-(N-1).<service>;
#   without it, the replicas of a compose service, found through DNS (all its addresses, then
#   each address's container name). TG_RPC_WAIT: seconds to wait until every server answers
#   health checks (default 60; 0: do not wait). TG_RPC_EXTRA: more host:port,... appended
#   (servers outside the cluster, e.g. a GPU host). TG_CA_FILE and TG_TOKEN_FILE authenticate.
#   TG_REMOTE_ONLY=1 runs on the servers' devices only (--device), not the client's CPU.
# TG_ENTRYPOINT_DRY_RUN=1 prints the command instead of running it.
set -euo pipefail

log() { echo "tg-entrypoint: $*" >&2; }
die() { log "$*"; exit 1; }

port=${TG_PORT:-50052}
ca_file=${TG_CA_FILE:-}
if [ -z "$ca_file" ] && [ -n "${TG_TLS_DIR:-}" ] && [ -f "$TG_TLS_DIR/ca.crt" ]; then
  ca_file=$TG_TLS_DIR/ca.crt
fi

# This container's name among its replicas, for picking its certificate: a StatefulSet pod's
# hostname is its name (rpc-server-0); a compose replica's hostname is its container id, so
# its name comes from reverse DNS of its address (<project>_<service>_<n>.<network> with
# compose 1, <project>-<service>-<n>.<network> with compose 2).
replica_names() {
  [ -n "${TG_REPLICA_NAME:-}" ] && echo "$TG_REPLICA_NAME"
  hostname
  local ip name
  ip=$(hostname -i 2>/dev/null | awk '{print $1}')
  [ -n "$ip" ] || return 0
  name=$(getent -s dns hosts "$ip" | awk '{print $2}' | head -1)
  [ -n "$name" ] && echo "${name%%.*}" | tr '_' '-'
  return 0
}

# Sets cert/key to this server's certificate in TG_TLS_DIR.
pick_certificate() {
  local dir=$TG_TLS_DIR n f base
  while read -r n; do
    [ -n "$n" ] || continue
    [ -f "$dir/$n.crt" ] && { cert=$dir/$n.crt; key=$dir/$n.key; return; }
    for f in "$dir"/*.crt; do  # rpc-server-2.crt for the container tensorgrid-rpc-server-2
      base=$(basename "$f" .crt)
      [ "$base" != ca ] || continue
      case "$n" in *-"$base") cert=$f; key=$dir/$base.key; return ;; esac
    done
  done < <(replica_names)
  [ -f "$dir/tls.crt" ] && { cert=$dir/tls.crt; key=$dir/tls.key; return; }
  die "no certificate for this replica ($(replica_names | tr '\n' ' ')) in $dir:" \
      "expected <name>.crt/.key or tls.crt/tls.key (deploy/compose/gen-secrets.sh makes one per replica)"
}

server_flags() {
  flags=(-H "${TG_HOST:-0.0.0.0}" -p "$port")
  if [ -n "${TG_TLS_DIR:-}" ]; then
    pick_certificate
    flags+=(--tls-cert "$cert" --tls-key "$key")
  fi
  [ -n "$ca_file" ] && flags+=(--peer-tls-ca "$ca_file")
  [ -n "${TG_TOKEN_FILE:-}" ] && flags+=(--auth-token-file "$TG_TOKEN_FILE")
  [ -n "${TG_METRICS_PORT:-}" ] && flags+=(--metrics-port "$TG_METRICS_PORT")
  [ -n "${TG_HEALTH_PORT:-}" ] && flags+=(--health-port "$TG_HEALTH_PORT")
  [ -n "${TG_CACHE_DIR:-}" ] && flags+=(-c "$TG_CACHE_DIR")
  [ -n "${TG_CACHE_MAX_GB:-}" ] && flags+=(--cache-max-gb "$TG_CACHE_MAX_GB")
  if [ "${TG_GPU_COUNT:-0}" -gt 0 ] 2>/dev/null; then
    flags+=(-d "$(seq -s, 0 $((TG_GPU_COUNT - 1)))")
  fi
  [ "${TG_INSECURE:-0}" = 1 ] && flags+=(--insecure)
  return 0
}

# The replicas of a compose service: every address of the service name, named by reverse
# DNS (container names resolve on the project's network), in replica order.
compose_replicas() {
  local ip name
  getent ahostsv4 "$TG_RPC_SERVICE" | awk '{print $1}' | sort -u | while read -r ip; do
    name=$(getent -s dns hosts "$ip" | awk '{print $2}' | head -1)
    [ -n "$name" ] && echo "${name%%.*}"
  done | sort -V
}

rpc_list() {
  local found
  found=$(cluster_list)
  if [ -n "${TG_RPC_EXTRA:-}" ]; then found=${found:+$found,}$TG_RPC_EXTRA; fi
  echo "$found"
}

cluster_list() {
  if [ -n "${TG_RPC:-}" ]; then echo "$TG_RPC"; return; fi
  [ -n "${TG_RPC_SERVICE:-}" ] || return 0
  local p=${TG_RPC_PORT:-50052} names=()
  if [ -n "${TG_RPC_REPLICAS:-}" ]; then
    local i
    for ((i = 0; i < TG_RPC_REPLICAS; i++)); do
      names+=("${TG_RPC_STATEFULSET:-$TG_RPC_SERVICE}-$i.$TG_RPC_SERVICE")
    done
  else
    mapfile -t names < <(compose_replicas)
  fi
  [ ${#names[@]} -gt 0 ] || die "no replicas of '$TG_RPC_SERVICE' found in DNS"
  local out=() n
  for n in "${names[@]}"; do out+=("$n:$p"); done
  (IFS=,; echo "${out[*]}")
}

# Waits until every endpoint answers SERVING (servers still starting, or the StatefulSet
# still rolling out), for up to TG_RPC_WAIT seconds.
wait_for_servers() {
  local list=$1 deadline=$((SECONDS + ${TG_RPC_WAIT:-60})) e probe
  probe=(rpc-server)
  [ -n "$ca_file" ] && probe+=(--peer-tls-ca "$ca_file")
  for e in ${list//,/ }; do
    until "${probe[@]}" --health-probe "$e" >/dev/null 2>&1; do
      [ $SECONDS -lt $deadline ] || die "$e is not serving after ${TG_RPC_WAIT:-60} s: $("${probe[@]}" --health-probe "$e" 2>&1)"
      sleep 1
    done
  done
}

client_flags() {
  flags=()
  local list
  list=$(rpc_list)
  [ -n "$list" ] || return 0
  [ "${TG_RPC_WAIT:-60}" = 0 ] || wait_for_servers "$list"
  flags+=(--rpc "$list")
  [ -n "$ca_file" ] && flags+=(--rpc-tls-ca "$ca_file")
  [ -n "${TG_TOKEN_FILE:-}" ] && flags+=(--rpc-token-file "$TG_TOKEN_FILE")
  if [ "${TG_REMOTE_ONLY:-0}" = 1 ]; then
    local devices
    devices=$(tg-run "${flags[@]}" --list-devices | awk '$2 == "REMOTE" {print $1}' | paste -sd, -)
    [ -n "$devices" ] || die "TG_REMOTE_ONLY=1 but the servers list no devices"
    flags+=(--device "$devices")
  fi
  return 0
}

run() {
  if [ "${TG_ENTRYPOINT_DRY_RUN:-0}" = 1 ]; then
    local a out=()
    for a in "$@"; do [[ "$a" =~ [[:space:]] ]] && out+=("'$a'") || out+=("$a"); done
    echo "${out[*]}"
    exit 0
  fi
  exec "$@"
}

cmd=${1:-rpc-server}
[ $# -gt 0 ] && shift
case "$cmd" in
  rpc-server)
    server_flags
    run rpc-server "${flags[@]}" "$@" ;;
  tg-run|tg-bench|tg-ops)
    client_flags
    run "$cmd" "${flags[@]}" "$@" ;;
  health)
    probe=(--health-probe "$port")
    if [ -n "${TG_TLS_DIR:-}" ]; then pick_certificate; probe+=(--tls-cert "$cert"); fi
    [ -n "${TG_TOKEN_FILE:-}" ] && probe+=(--auth-token-file "$TG_TOKEN_FILE")
    run rpc-server "${probe[@]}" ;;
  rpc-list)
    rpc_list ;;
  *)
    run "$cmd" "$@" ;;
esac
