#!/usr/bin/env bash
# Makes a cluster's secrets with openssl: a CA, one certificate per rpc-server (its own key,
# named for the names clients and other servers reach it by) and a shared bearer token.
#
#   gen-secrets.sh [-n SERVERS] [-o DIR] [-p PROJECT] [-s SERVICE]            # compose
#   gen-secrets.sh --k8s [-n REPLICAS] [-o DIR] [--namespace NS] [-s SERVICE] # Kubernetes
#   gen-secrets.sh --host NAME [-o DIR]     one more server, e.g. a GPU host, by DNS name or IP
#
# Writes DIR (default: deploy/compose/secrets beside this script):
#   tls/ca.crt                the CA clients and servers verify servers with
#   tls/<server>.crt, .key    per server: compose rpc-server-1..N, Kubernetes rpc-server-0..N-1,
#                             --host NAME: NAME
#   token                     the bearer token (64 hex digits)
#   ca.key                    the CA's key, outside tls/ so no container ever mounts it; keep
#                             it to add servers later (an existing CA and token are reused)
# Compose names a replica <project>_<service>_<n> (compose 1) or <project>-<service>-<n>
# (compose 2); -p must be the compose project name (default: tensorgrid, as in .env).
# Kubernetes names a StatefulSet pod <set>-<i>.<service>[.<ns>.svc[.cluster.local]].
# Every certificate also holds localhost and 127.0.0.1 (the container's own health probe).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
n=2
out=$here/secrets
project=tensorgrid
service=rpc-server
k8s=0
hosts=()
namespace=default
days=${TG_CERT_DAYS:-365}
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift ;;
    -o) out=$2; shift ;;
    -p) project=$2; shift ;;
    -s) service=$2; shift ;;
    --k8s) k8s=1 ;;
    --host) hosts+=("$2"); shift ;;
    --namespace) namespace=$2; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "gen-secrets: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "gen-secrets: -n '$n' is not a positive count" >&2; exit 2; }
command -v openssl >/dev/null || { echo "gen-secrets: openssl is missing" >&2; exit 1; }

mkdir -p "$out/tls"
cd "$out"
ssl() { openssl "$@" 2>/dev/null; }

if [ ! -f ca.key ] || [ ! -f tls/ca.crt ]; then
  ssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$days" -subj "/CN=tensorgrid cluster CA" \
      -keyout ca.key -out tls/ca.crt
  chmod 600 ca.key
fi
[ -s token ] || openssl rand -hex 32 > token

# The rpc-servers run as uid 10001 (the images' user): as root, hand them the keys alone;
# otherwise the keys must be world-readable for the bind mount to work.
owner() {
  if [ "$(id -u)" -eq 0 ]; then
    chown 10001:10001 "$@" && chmod 440 "$@"
  else
    chmod 644 "$@"
  fi
}

issue() {  # NAME SAN
  local name=$1 san=$2
  ssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" -keyout "tls/$name.key" -out "$name.csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" > "$name.ext"
  ssl x509 -req -in "$name.csr" -CA tls/ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
      -extfile "$name.ext" -out "tls/$name.crt"
  rm -f "$name.csr" "$name.ext"
  owner "tls/$name.key"
  chmod 644 "tls/$name.crt"
}

local_names="DNS:localhost,IP:127.0.0.1"
if [ ${#hosts[@]} -gt 0 ]; then
  for h in "${hosts[@]}"; do
    if [[ "$h" =~ ^[0-9.]+$|: ]]; then kind=IP; else kind=DNS; fi
    issue "$h" "$kind:$h,$local_names"
  done
  n=${#hosts[@]}
elif [ "$k8s" = 1 ]; then
  for ((i = 0; i < n; i++)); do
    pod=$service-$i
    issue "$pod" "DNS:$pod.$service,DNS:$pod.$service.$namespace.svc,DNS:$pod.$service.$namespace.svc.cluster.local,$local_names"
  done
else
  for ((i = 1; i <= n; i++)); do
    issue "$service-$i" "DNS:$service-$i,DNS:${project}_${service}_$i,DNS:$project-$service-$i,$local_names"
  done
fi
rm -f tls/ca.srl ca.srl
chmod 644 tls/ca.crt
owner token
chmod 755 . tls

echo "gen-secrets: $n server certificates, CA and token in $out" >&2
if [ "$k8s" = 1 ]; then
  cat >&2 <<EOF
gen-secrets: load them into the namespace:
  kubectl -n $namespace create secret generic tensorgrid-tls --from-file=$out/tls
  kubectl -n $namespace create secret generic tensorgrid-token --from-file=token=$out/token
EOF
fi
