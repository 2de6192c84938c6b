#!/usr/bin/env bash
# Makes what rpc-servers on several machines and their clients need for TLS and a bearer
# token, with openssl alone. See usage() below or: bash scripts/gen-certs.sh --help
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: gen-certs.sh [-o DIR] [--days N] [--local] HOST...

Makes, in DIR (default ./certs), the files rpc-server and its clients need for TLS and a
bearer token (README.md, "Several machines"; docs/rpc.md, "Security"):

  ca.pem               the CA: clients verify the servers with it (tg-run --rpc-tls-ca), and
                       servers each other (rpc-server --peer-tls-ca: over several servers,
                       -sm layer and tensor send between them) and client certificates
                       (--tls-client-ca)
  ca.key               the CA's key: copy it nowhere; keep it to add hosts later
  HOST.pem, HOST.key   per HOST, the server's certificate (subjectAltName: HOST as a DNS name
                       or IP address) and key (rpc-server --tls-cert/--tls-key); usable as
                       --peer-tls-cert/--peer-tls-key too
  client.pem, client.key
                       a client certificate for servers that require mutual TLS
                       (rpc-server --tls-client-ca ca.pem; tg-run --rpc-tls-cert/--rpc-tls-key)
  token                a random bearer token (64 hex digits) for rpc-server --auth-token-file
                       and tg-run --rpc-token-file

HOST is the name or address clients reach the server by (host1, gpu7.lab.example,
10.0.0.12, fd00::12); each gets its own certificate. Keys and the token are mode 600.

It never overwrites a file: run it again with more hosts and it keeps ca.pem, ca.key, the
token, client.* and the existing hosts' certificates and keys byte for byte, and only adds
the new hosts (signed by the same CA). To replace a host's certificate, delete HOST.pem and
HOST.key first.

Options:
  -o, --out DIR   output directory (default: ./certs; made if missing, mode 700)
  --days N        lifetime of the certificates made now, in days (default 365)
  --local         also put localhost, 127.0.0.1 and ::1 in every server certificate (a
                  loopback HOST gets them anyway)
  -h, --help      this help

Exit status: 0 done, 1 openssl missing or failed, or DIR holds half of a pair (a .pem without
its .key, a host certificate without the CA), 2 usage error.
EOF
}

die_usage() { echo "gen-certs: $*" >&2; echo "usage: gen-certs.sh [-o DIR] [--days N] [--local] HOST... (see --help)" >&2; exit 2; }
die() { echo "gen-certs: $*" >&2; exit 1; }

out=certs
days=365
local_sans=0
hosts=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    -o|--out)
      [ $# -ge 2 ] || die_usage "$1 needs a directory"
      out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --days)
      [ $# -ge 2 ] || die_usage "--days needs a number"
      days=$2; shift ;;
    --days=*) days=${1#--days=} ;;
    --local) local_sans=1 ;;
    --) shift; hosts+=("$@"); break ;;
    -*) die_usage "unknown option '$1'" ;;
    *) hosts+=("$1") ;;
  esac
  shift
done
[ -n "$out" ] || die_usage "-o needs a directory"
[[ "$days" =~ ^[1-9][0-9]{0,5}$ ]] || die_usage "--days '$days' is not a positive number of days"
[ ${#hosts[@]} -gt 0 ] || die_usage "name at least one host"

# Each host: its kind (DNS or IP) and the name it is given. Unbracketed IPv6, no ports.
declare -A seen=()
names=()
kinds=()
for h in "${hosts[@]}"; do
  [[ "$h" =~ ^\[(.*)\]$ ]] && h=${BASH_REMATCH[1]}
  if [[ "$h" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    IFS=. read -r a b c d <<<"$h"
    for o in "$a" "$b" "$c" "$d"; do
      if ! [[ "$o" =~ ^(0|[1-9][0-9]{0,2})$ ]] || [ "$o" -gt 255 ]; then
        die_usage "'$h' is not an IPv4 address"
      fi
    done
    kind=IP
  elif [[ "$h" == *:*:* ]]; then
    [[ "$h" =~ ^[0-9A-Fa-f:.]+$ ]] || die_usage "'$h' is not an IPv6 address"
    kind=IP
  elif [[ "$h" == *:* ]]; then
    die_usage "'$h': give the host without its port"
  elif [[ "$h" =~ ^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$ ]] && [ "${#h}" -le 253 ]; then
    kind=DNS
  else
    die_usage "'$h' is not a host name or IP address"
  fi
  [ -z "${seen[$h]:-}" ] || continue
  seen[$h]=1
  names+=("$h")
  kinds+=("$kind")
done
for f in ca token client; do
  [ -z "${seen[$f]:-}" ] || die_usage "a host may not be called '$f' (its files would clash with $f.*)"
done

command -v openssl >/dev/null || die "openssl is missing (apt-get install openssl)"

# Check what is there before making anything: pairs are whole, host certificates have their CA.
have() { [ -e "$out/$1" ] || [ -L "$out/$1" ]; }
pair_state() {  # NAME -> "both", "none"; dies on half a pair
  local n=$1
  if have "$n.pem" && have "$n.key"; then echo both
  elif ! have "$n.pem" && ! have "$n.key"; then echo none
  else die "$out holds only one of $n.pem and $n.key: restore the other or delete both"
  fi
}
ca_state=$(pair_state ca)
client_state=$(pair_state client)
host_states=()
for h in "${names[@]}"; do host_states+=("$(pair_state "$h")"); done
if [ "$ca_state" = none ]; then
  for h in client "${names[@]}"; do
    have "$h.pem" && die "$out/$h.pem exists but the CA that signed it (ca.pem, ca.key) does not:" \
                         "restore them, or delete $h.pem and $h.key"
  done
fi
if have token && [ ! -s "$out/token" ]; then
  die "$out/token exists but is empty: delete it to make a new one"
fi

umask 077
mkdir -p "$out"
tmp=$(mktemp -d "$out/.gen-certs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

ssl() {
  if ! openssl "$@" >"$tmp/log" 2>&1; then
    echo "gen-certs: openssl $* failed:" >&2
    cat "$tmp/log" >&2
    exit 1
  fi
}
# A minimal config, so that the system's openssl.cnf adds nothing to the certificates.
cat >"$tmp/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
newkey() { ssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
# Moves a finished file into place; never replaces one.
place() {
  mv -n "$tmp/$1" "$out/$1" 2>/dev/null || true
  [ ! -e "$tmp/$1" ] || die "$out/$1 appeared while this ran; left it alone"
}
made=()
kept=()

if [ "$ca_state" = none ]; then
  newkey "$tmp/ca.key"
  ssl req -x509 -new -key "$tmp/ca.key" -subj "/CN=tensorgrid CA" -days "$days" -sha256 \
      -config "$tmp/openssl.cnf" -extensions ca -set_serial "0x$(openssl rand -hex 16)" \
      -out "$tmp/ca.pem"
  chmod 644 "$tmp/ca.pem"
  place ca.key
  place ca.pem
  made+=(ca.pem ca.key)
else
  ssl x509 -in "$out/ca.pem" -noout
  kept+=(ca.pem ca.key)
  if ! openssl x509 -in "$out/ca.pem" -noout -checkend "$(((days - 1) * 86400))" >/dev/null; then
    echo "gen-certs: warning: ca.pem expires before certificates of --days $days would;" \
         "they stop verifying with it" >&2
  fi
fi

# issue NAME SUBJECT EXTENSIONS: NAME.key and NAME.pem signed by the CA.
issue() {
  local name=$1 subject=$2 ext=$3
  newkey "$tmp/$name.key"
  ssl req -new -key "$tmp/$name.key" -subj "$subject" -config "$tmp/openssl.cnf" \
      -out "$tmp/$name.csr"
  printf '%s\n' "$ext" >"$tmp/$name.ext"
  ssl x509 -req -in "$tmp/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -days "$days" \
      -sha256 -set_serial "0x$(openssl rand -hex 16)" -extfile "$tmp/$name.ext" \
      -out "$tmp/$name.pem"
  chmod 644 "$tmp/$name.pem"
  place "$name.key"
  place "$name.pem"
  made+=("$name.pem" "$name.key")
}
leaf_ext="basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid"

is_loopback() {
  [[ "$1" == localhost || "$1" == *.localhost || "$1" == ::1 || "$1" =~ ^127\. ]]
}
for i in "${!names[@]}"; do
  h=${names[$i]}
  if [ "${host_states[$i]}" = both ]; then
    kept+=("$h.pem" "$h.key")
    if ! openssl verify -CAfile "$out/ca.pem" "$out/$h.pem" >/dev/null 2>&1; then
      echo "gen-certs: warning: the existing $out/$h.pem does not verify with $out/ca.pem" \
           "(another CA's, or expired); kept it" >&2
    fi
    continue
  fi
  san="${kinds[$i]}:$h"
  if [ "$local_sans" = 1 ] || is_loopback "$h"; then
    for l in DNS:localhost IP:127.0.0.1 IP:::1; do
      [ "$l" = "$san" ] || [[ "$san" == "$l,"* ]] || san="$san,$l"
    done
  fi
  issue "$h" "/CN=$h" "$leaf_ext
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = $san"
done

if [ "$client_state" = none ]; then
  issue client "/CN=tensorgrid client" "$leaf_ext
extendedKeyUsage = clientAuth"
else
  kept+=(client.pem client.key)
fi

if have token; then
  kept+=(token)
else
  openssl rand -hex 32 >"$tmp/token"
  place token
  made+=(token)
fi

[ ${#made[@]} -eq 0 ] || echo "gen-certs: made in $out: ${made[*]}"
[ ${#kept[@]} -eq 0 ] || echo "gen-certs: kept (already there, unchanged): ${kept[*]}"
cat <<EOF

Copy to each server (rpc-server --tls-cert HOST.pem --tls-key HOST.key --auth-token-file token
--peer-tls-ca ca.pem):
EOF
for h in "${names[@]}"; do
  printf '  %-16s %s\n' "$h:" "$out/$h.pem $out/$h.key $out/ca.pem $out/token"
done
cat <<EOF
Copy to each client (tg-run --rpc-tls-ca ca.pem --rpc-token-file token):
  $out/ca.pem $out/token
  and $out/client.pem $out/client.key where servers require client certificates
  (tg-run --rpc-tls-cert client.pem --rpc-tls-key client.key)
Copy nowhere: $out/ca.key (the CA's key; keep it to add hosts: run this again with them)
EOF
