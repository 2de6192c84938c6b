#!/usr/bin/env bash
# Makes a cluster's secrets with openssl: a CA, one certificate per rpc-server (its own key,
# named for the name clients and other servers reach it by) and a shared bearer token.
# Running it again only adds what is missing: existing keys and certificates are kept
# byte for byte (servers using them keep running); --rotate re-issues them.
#
#   gen-secrets.sh [-n SERVERS] [-o DIR] [-s SERVICE]                         # compose
#   gen-secrets.sh --k8s [-n REPLICAS] [-o DIR] [--namespace NS] [-s SERVICE] # Kubernetes
#   gen-secrets.sh --host NAME [-o DIR]     one more server, e.g. a GPU host, by DNS name or IP
# Options for all three:
#   --days N      lifetime of the server certificates issued now (default 365)
#   --ca-days N   lifetime of a CA made now (default 3650; an existing CA is kept)
#   --rotate      re-issue the selected servers' keys and certificates (renewal, or a key
#                 that leaked) and print how to restart the servers one at a time
#
# Writes DIR (default: deploy/compose/secrets beside this script):
#   ca.crt                    the CA clients and servers verify servers with
#   ca.key                    the CA's key: never mounted into a container; keep it to add
#                             or renew servers later (an existing CA and token are reused)
#   token                     the bearer token (64 hex digits), also for /metrics
#   servers/NAME/tls.crt,key  per server, in a folder of its own, so that each server mounts
#                             its own key and no other: compose rpc-server-1..N, Kubernetes
#                             rpc-server-0..N-1, --host NAME: NAME
#   docker-compose.servers.yml  (compose) the servers rpc-server-1..N as compose services,
#                             each mounting servers/<its name>; use it with docker-compose.yml
#   retired/                  (--rotate) the replaced folders, still mounted by the servers
#                             running on them until restarted; delete it after the restarts
# Compose servers are reached by their service name rpc-server-<i>; Kubernetes names a
# StatefulSet pod <set>-<i>.<service>[.<ns>.svc[.cluster.local]]. Every certificate also
# holds localhost and 127.0.0.1 (the container's own health probe).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
n=2
out=$here/secrets
service=rpc-server
k8s=0
hosts=()
namespace=default
days=${TG_CERT_DAYS:-365}
ca_days=3650
rotate=0
usage() { sed -n '2,32p' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift ;;
    -o) out=$2; shift ;;
    -p) echo "gen-secrets: -p is no longer needed (certificates name the compose service," \
             "not the project); ignored" >&2; shift ;;
    -s) service=$2; shift ;;
    --k8s) k8s=1 ;;
    --host) hosts+=("$2"); shift ;;
    --namespace) namespace=$2; shift ;;
    --days) days=$2; shift ;;
    --ca-days) ca_days=$2; shift ;;
    --rotate) rotate=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gen-secrets: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "gen-secrets: -n '$n' is not a positive count" >&2; exit 2; }
for v in "$days" "$ca_days"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "gen-secrets: --days/--ca-days '$v' is not a positive number of days" >&2; exit 2; }
done
command -v openssl >/dev/null || { echo "gen-secrets: openssl is missing (apt-get install openssl)" >&2; exit 1; }
case "$out" in *[\"$'\n']*) echo "gen-secrets: -o '$out': no quotes or newlines, please" >&2; exit 2 ;; esac

mkdir -p "$out/servers"
out=$(cd "$out" && pwd)
cd "$out"
log() { echo "gen-secrets: $*" >&2; }
ssl() {
  local err
  err=$(openssl "$@" 2>&1 >/dev/null) || { log "openssl $1 failed: $err"; exit 1; }
}

# The layout before per-server folders (tls/ca.crt, tls/<name>.crt/.key, all in one folder
# every server mounted): carried over as is, so the servers keep their certificates.
if [ -d tls ]; then
  [ -f ca.crt ] || { [ -f tls/ca.crt ] && cp -p tls/ca.crt ca.crt; }
  for crt in tls/*.crt; do
    [ -f "$crt" ] || continue
    name=$(basename "$crt" .crt)
    [ "$name" != ca ] && [ -f "tls/$name.key" ] && [ ! -e "servers/$name" ] || continue
    mkdir -p "servers/$name"
    cp -p "$crt" "servers/$name/tls.crt"
    cp -p "tls/$name.key" "servers/$name/tls.key"
    log "carried over $name from the old tls/ folder to servers/$name"
  done
  log "the old tls/ folder (every key in one folder) is no longer used: once the servers" \
      "run with docker-compose.servers.yml, delete it (rm -r $out/tls)"
fi

if [ ! -f ca.key ] || [ ! -f ca.crt ]; then
  if [ -n "$(ls servers 2>/dev/null)" ]; then
    log "ca.key or ca.crt is missing in $out but server certificates exist: a new CA would" \
        "not verify them. Restore the CA, or start over in an empty folder (-o DIR)."
    exit 1
  fi
  ssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$ca_days" \
      -subj "/CN=tensorgrid cluster CA" -keyout ca.key -out ca.crt
  chmod 600 ca.key
  log "new CA, valid $ca_days days"
fi
[ -s token ] || (umask 077 && openssl rand -hex 32 > token)

# The rpc-servers run as uid 10001 (the images' user): as root, hand them their key alone;
# otherwise the key must be world-readable for the bind mount to work (single-user hosts).
is_root=0
[ "$(id -u)" -eq 0 ] && is_root=1
owner() {  # FILE...: readable by the servers' uid
  if [ $is_root = 1 ]; then chown 10001:10001 "$@" && chmod 440 "$@"; else chmod 644 "$@"; fi
}
owner_dir() {
  if [ $is_root = 1 ]; then chown 0:10001 "$1" && chmod 750 "$1"; else chmod 755 "$1"; fi
}

issued=()
kept=()
issue() {  # NAME SAN: servers/NAME/tls.crt and tls.key, unless there already (and no --rotate)
  local name=$1 san=$2 dir=servers/$1
  if [ -f "$dir/tls.crt" ] && [ -f "$dir/tls.key" ] && [ $rotate = 0 ]; then
    if ! openssl verify -CAfile ca.crt "$dir/tls.crt" >/dev/null 2>&1; then
      log "$dir/tls.crt is not signed by ca.crt (or has expired): re-issue it with --rotate"
      exit 1
    fi
    if ! openssl x509 -in "$dir/tls.crt" -noout -checkend $((30 * 86400)) >/dev/null; then
      log "WARNING: $dir/tls.crt expires within 30 days ($(openssl x509 -in "$dir/tls.crt" \
          -noout -enddate | cut -d= -f2)): renew with --rotate"
    fi
    kept+=("$name")
    return
  fi
  local tmp
  tmp=$(mktemp -d "servers/.new.XXXXXX")
  ssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" \
      -keyout "$tmp/tls.key" -out "$tmp/csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" > "$tmp/ext"
  ssl x509 -req -in "$tmp/csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
      -extfile "$tmp/ext" -out "$tmp/tls.crt"
  rm -f "$tmp/csr" "$tmp/ext"
  owner "$tmp/tls.key"
  chmod 644 "$tmp/tls.crt"
  owner_dir "$tmp"
  if [ -e "$dir" ]; then
    # Moved, not deleted: a running server's bind mount keeps the folder it was started
    # with, so it keeps serving (and passing its health check) until it is restarted.
    mkdir -p retired
    chmod 700 retired
    mv "$dir" "retired/$name.$(date +%Y%m%dT%H%M%S).$$"
  fi
  mv "$tmp" "$dir"
  issued+=("$name")
}

local_names="DNS:localhost,IP:127.0.0.1"
names=()
if [ ${#hosts[@]} -gt 0 ]; then
  for h in "${hosts[@]}"; do
    if [[ "$h" =~ ^[0-9.]+$|: ]]; then kind=IP; else kind=DNS; fi
    issue "$h" "$kind:$h,$local_names"
    names+=("$h")
  done
elif [ "$k8s" = 1 ]; then
  for ((i = 0; i < n; i++)); do
    pod=$service-$i
    issue "$pod" "DNS:$pod.$service,DNS:$pod.$service.$namespace.svc,DNS:$pod.$service.$namespace.svc.cluster.local,$local_names"
    names+=("$pod")
  done
else
  for ((i = 1; i <= n; i++)); do
    issue "$service-$i" "DNS:$service-$i,$local_names"
    names+=("$service-$i")
  done
fi
rm -f ca.srl
chmod 644 ca.crt
owner token
chmod 755 . servers

# Compose: one service per server, each mounting its own folder (compose's --scale would
# give every replica the same mounts, so every key). Written anew each time, the same text
# for the same servers: `up -d` leaves running servers whose definition did not change alone.
write_compose() {
  local f=docker-compose.servers.yml tmp list="" name esc
  tmp=$(mktemp "$f.XXXXXX")
  esc=${out//\$/\$\$}  # compose interpolates $ in values
  {
    echo "# Written by gen-secrets.sh -n ${#names[@]}: do not edit (edit $here/server.template.yml)."
    echo "# docker-compose -f $here/docker-compose.yml -f $out/$f ..."
    echo 'version: "3.8"'
    echo "services:"
    for name in "${names[@]}"; do
      sed -e "s|@NAME@|$name|g" -e "s|@SECRETS@|$esc|g" "$here/server.template.yml" |
        grep -v '^ *#'
      list=${list:+$list,}$name:50052
    done
    echo "  client:"
    echo "    depends_on: [$(IFS=,; echo "${names[*]}" | sed 's/,/, /g')]"
    echo "    environment:"
    echo "      TG_RPC: \"$list\""
    echo "    volumes:"
    echo "      - {type: bind, source: \"$esc/ca.crt\", target: /run/secrets/tensorgrid/ca.crt, read_only: true}"
    echo "      - {type: bind, source: \"$esc/token\", target: /run/secrets/tensorgrid/token, read_only: true}"
  } > "$tmp"
  chmod 644 "$tmp"
  mv "$tmp" "$f"
}
if [ ${#hosts[@]} -eq 0 ] && [ "$k8s" = 0 ]; then write_compose; fi

log "$out: ${#issued[@]} certificates issued (${issued[*]:-none}), ${#kept[@]} kept" \
    "(${kept[*]:-none}); CA and token reused when present"
if [ ${#issued[@]} -gt 0 ]; then
  log "new certificates valid $days days, until" \
      "$(openssl x509 -in "servers/${issued[0]}/tls.crt" -noout -enddate | cut -d= -f2)"
fi

if [ "$k8s" = 1 ]; then
  files="--from-file=ca.crt=$out/ca.crt"
  for name in "${names[@]}"; do
    files+=" --from-file=$name.crt=$out/servers/$name/tls.crt --from-file=$name.key=$out/servers/$name/tls.key"
  done
  cat >&2 <<EOF
gen-secrets: load them into the namespace (create, or replace after adding or rotating):
  kubectl -n $namespace create secret generic tensorgrid-tls $files --dry-run=client -o yaml | kubectl apply -f -
  kubectl -n $namespace create secret generic tensorgrid-token --from-file=token=$out/token --dry-run=client -o yaml | kubectl apply -f -
EOF
fi

if [ $rotate = 1 ] && [ ${#issued[@]} -gt 0 ]; then
  if [ "$k8s" = 1 ]; then
    cat >&2 <<EOF
gen-secrets: rotated. After the kubectl apply above, restart the pods one at a time (each
  copies its own key from the Secret when it starts; running pods keep the old one):
  kubectl -n $namespace rollout restart statefulset/$service
  kubectl -n $namespace rollout status statefulset/$service
EOF
  elif [ ${#hosts[@]} -gt 0 ]; then
    cat >&2 <<EOF
gen-secrets: rotated. On each host, copy servers/<name>/tls.crt and tls.key over the old ones
  and restart its server right away (docker restart tg-gpu): its health check pins the file.
EOF
  else
    cat >&2 <<EOF
gen-secrets: rotated. Running servers keep their old certificate (their folder moved to
  $out/retired) until restarted; restart them one at a time, each healthy before the next:
  for s in ${issued[*]}; do
    docker-compose restart \$s
    until [ "\$(docker inspect -f '{{.State.Health.Status}}' \$(docker-compose ps -q \$s))" = healthy ]; do sleep 2; done
  done
  rm -r $out/retired
(with COMPOSE_FILE set as in docs/deployment.md)
EOF
  fi
fi
