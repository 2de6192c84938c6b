#!/usr/bin/env bash
# tg-entrypoint: the images' entrypoint. It turns TG_* environment variables into flags, so a
# compose file and a Kubernetes manifest configure the containers the same way, and finds
# the servers of a cluster for the client tools.
#
#   tg-entrypoint rpc-server [ARGS]      serve this container's devices (the default command)
#   tg-entrypoint tg-run|tg-bench [ARGS] a client tool with --rpc (and TLS, token) filled in
#   tg-entrypoint health                 the HEALTHCHECK: grpc.health.v1 of the local server
#   tg-entrypoint select-tls             copy this replica's certificate and key, and nothing
#                                        else, from TG_TLS_SOURCE_DIR to TG_TLS_DIR (a
#                                        Kubernetes init container: the server's container
#                                        then mounts its own key only)
#   tg-entrypoint rpc-list               print the --rpc list the client tools would get
#   tg-entrypoint OTHER [ARGS]           run OTHER as is (tg-gguf, bash, ...)
#
# Server: TG_HOST (0.0.0.0), TG_PORT (50052), TG_TLS_DIR (a folder holding this server's
#   certificate and key: tls.crt/tls.key, the server's own folder as gen-secrets.sh writes
#   it; else <name>.crt/.key for the replica's name, TG_REPLICA_NAME when set, else the
#   hostname or reverse DNS name; ca.crt there also verifies other servers on peer copies),
#   TG_TOKEN_FILE, TG_METRICS_PORT, TG_METRICS_HOST (the server's default: 127.0.0.1; a
#   container sets 0.0.0.0 to be scraped), TG_METRICS_TOKEN_FILE (/metrics asks for
#   Authorization: Bearer <token>), TG_HEALTH_PORT, TG_HEALTH_HOST (default 127.0.0.1;
#   0.0.0.0 for the kubelet's probes), TG_CACHE_DIR, TG_CACHE_MAX_GB,
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
#   A -m/--model file that is not in the container stops the client with where to put it.
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

# Sets cert/key to this server's certificate in DIR (default TG_TLS_DIR).
pick_certificate() {
  local dir=${1:-$TG_TLS_DIR} n f base
  # The server's own folder (gen-secrets.sh's servers/NAME, or a kubernetes.io/tls Secret).
  [ -f "$dir/tls.crt" ] && [ -f "$dir/tls.key" ] && { cert=$dir/tls.crt; key=$dir/tls.key; return; }
  while read -r n; do
    [ -n "$n" ] || continue
    [ -f "$dir/$n.crt" ] && { cert=$dir/$n.crt; key=$dir/$n.key; return; }
    for f in "$dir"/*.crt; do  # rpc-server-2.crt for the container tensorgrid-rpc-server-2
      base=$(basename "$f" .crt)
      [ "$base" != ca ] || continue
      case "$n" in *-"$base") cert=$f; key=$dir/$base.key; return ;; esac
    done
  done < <(replica_names)
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
  [ -n "${TG_METRICS_HOST:-}" ] && flags+=(--metrics-host "$TG_METRICS_HOST")
  [ -n "${TG_METRICS_TOKEN_FILE:-}" ] && flags+=(--metrics-token-file "$TG_METRICS_TOKEN_FILE")
  [ -n "${TG_HEALTH_PORT:-}" ] && flags+=(--health-port "$TG_HEALTH_PORT")
  [ -n "${TG_HEALTH_HOST:-}" ] && flags+=(--health-host "$TG_HEALTH_HOST")
  # The servers this one exchanges data with (rpc-server's default is loopback only).
  [ -n "${TG_PEERS:-}" ] && flags+=(--peers "$TG_PEERS")
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

# A model file the client is told to load must be in the container: a models folder that
# was not mounted (or is empty) says so here instead of as a load error later.
check_model() {
  local want="" a
  while [ $# -gt 0 ]; do
    case "$1" in
      -m|--model) want=${2:-}; shift ;;
      --model=*) want=${1#--model=} ;;
    esac
    shift
  done
  [ -n "$want" ] && [ ! -f "$want" ] || return 0
  local dir
  dir=$(dirname "$want")
  if [ ! -d "$dir" ]; then
    die "model $want: no folder $dir in this container (mount your models there)"
  elif [ -z "$(ls -A "$dir" 2>/dev/null)" ]; then
    die "model $want: $dir is empty: put the GGUF file in the folder mounted there" \
        "(compose: TG_MODELS_DIR, default deploy/compose/models; demo/stories260K.gguf" \
        "ships in the repository)"
  fi
  die "model $want not found; $dir holds: $(ls "$dir" | head -20 | tr '\n' ' ')"
}

# Kubernetes init container: this replica's certificate and key, alone, from the Secret
# holding every server's (TG_TLS_SOURCE_DIR, mounted into the init container only) to the
# memory volume the server mounts (TG_TLS_DIR), as tls.crt and tls.key.
select_tls() {
  local src=${TG_TLS_SOURCE_DIR:?TG_TLS_SOURCE_DIR (the folder with every certificate)}
  local dst=${TG_TLS_DIR:?TG_TLS_DIR (the folder to copy the certificate to)}
  pick_certificate "$src"
  [ -f "$key" ] || die "no key $key beside $cert"
  rm -f "$dst/tls.crt" "$dst/tls.key"
  (umask 077 && cp "$key" "$dst/tls.key")
  cp "$cert" "$dst/tls.crt"
  chmod 0400 "$dst/tls.key"
  chmod 0444 "$dst/tls.crt"
  log "$(basename "$cert" .crt): certificate and key copied to $dst"
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
    check_model "$@"
    client_flags
    run "$cmd" "${flags[@]}" "$@" ;;
  health)
    probe=(--health-probe "$port")
    if [ -n "${TG_TLS_DIR:-}" ]; then pick_certificate; probe+=(--tls-cert "$cert"); fi
    [ -n "${TG_TOKEN_FILE:-}" ] && probe+=(--auth-token-file "$TG_TOKEN_FILE")
    run rpc-server "${probe[@]}" ;;
  rpc-list)
    rpc_list ;;
  select-tls)
    select_tls ;;
  *)
    run "$cmd" "$@" ;;
esac
