#!/usr/bin/env python3
"""Servers that require mutual TLS copy between themselves: --peer-tls-cert/--peer-tls-key.

  rpc_peer_tls_test.py --tg-run PATH --rpc-server PATH --client PATH(rpc_peer_pull_client)
                       --model MODEL

Makes a CA, a certificate for 127.0.0.1 and a second, untrusted CA (rpc_tls_test.make_pki)
plus a certificate from the untrusted CA, and starts rpc-servers that require client
certificates from the CA (--tls-client-ca). A PeerPull from such a server must present one:
- with --peer-tls-ca and --peer-tls-cert/--peer-tls-key of the CA, the bytes arrive;
- with no certificate, or one of the untrusted CA, the peer refuses the connection and the
  client gets "peer unreachable: ENDPOINT";
- tg-run -sm layer over two such servers gives local -sm none's greedy tokens, with the layer
  boundary copied server to server (tg_peer_copy_bytes_total > 0).
Exit 0 pass, 1 fail, 77 skipped (model or openssl missing).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import (SKIP, Server, local_env, model_missing, model_test_args,  # noqa: E402
                         openssl_missing)
from rpc_peers_test import Checker, pull  # noqa: E402
from rpc_tls_test import make_pki, openssl  # noqa: E402


def make_rogue(d):
    """A certificate for 127.0.0.1 signed by the CA the servers do not trust."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
            "rogue.key", "-out", "rogue.csr", cwd=d)
    openssl("x509", "-req", "-in", "rogue.csr", "-CA", "other-ca.pem", "-CAkey", "other-ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "rogue.pem", cwd=d)


def peer_tls_flags(d):
    """Makes the CAs and certificates in d and returns the flag sets of an mTLS cluster:
    mtls (a server that requires client certificates of the CA), peer_ca, good (peer_ca and a
    CA-signed peer certificate), rogue (peer_ca and a certificate of the untrusted CA),
    pull_client (rpc_peer_pull_client's) and tg_run (tg-run's --rpc-tls-*)."""
    make_pki(d)
    make_rogue(d)
    p = lambda name: os.path.join(d, name)  # noqa: E731
    peer_ca = ["--peer-tls-ca", p("ca.pem")]
    return dict(
        mtls=["--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
              "--tls-client-ca", p("ca.pem")],
        peer_ca=peer_ca,
        good=peer_ca + ["--peer-tls-cert", p("server.pem"), "--peer-tls-key", p("server.key")],
        rogue=peer_ca + ["--peer-tls-cert", p("rogue.pem"), "--peer-tls-key", p("rogue.key")],
        pull_client=["--tls-ca", p("ca.pem"), "--tls-cert", p("server.pem"), "--tls-key",
                     p("server.key")],
        tg_run=["--rpc-tls-ca", p("ca.pem"), "--rpc-tls-cert", p("server.pem"), "--rpc-tls-key",
                p("server.key")])


def main():
    a = model_test_args([("--client", dict(required=True))])
    if model_missing(a.model) or openssl_missing():
        return SKIP
    c = Checker()
    with tempfile.TemporaryDirectory(prefix="tg-peer-tls-") as d:
        f = peer_tls_flags(d)
        servers = []
        try:
            for i, extra in enumerate([f["good"], f["good"], f["peer_ca"], f["rogue"]]):
                servers.append(Server(a.rpc_server, 1, f["mtls"] + extra, d, i))
            src = servers[0]
            for s, label, works in [(servers[1], "CA-signed peer certificate", True),
                                    (servers[2], "no peer certificate", False),
                                    (servers[3], "untrusted peer certificate", False)]:
                code, msg, data, _ = pull(a.client, s.endpoint, src.endpoint, "--grant-from",
                                          src.endpoint, *f["pull_client"])
                if works:
                    c.check(code == "OK" and data == "data: same", f"{label}: {code} {msg} {data}")
                else:
                    c.check(code == "UNAVAILABLE" and msg == f"peer unreachable: {src.endpoint}",
                            f"{label}: refused: {code}: {msg}")
            check_layer_split(a, c, servers[:2], f["tg_run"])
            if not c.ok:
                for s in servers:
                    print(f"--- {s.endpoint} log:\n{s.read_log()}")
        finally:
            for s in servers:
                s.stop()
    return 0 if c.ok else 1


def check_layer_split(a, c, servers, tls):
    env = local_env()
    common = ["-m", a.model, "-n", "16", "--temp", "0", "--json", "-t", "1"]
    base = subprocess.run([a.tg_run] + common, capture_output=True, text=True, env=env)
    want = json.loads(base.stdout)["tokens"]
    before = sum(s.metrics().get("tg_peer_copy_bytes_total", 0) for s in servers)
    devices = ",".join(f"RPC[{s.endpoint}]/0" for s in servers)
    r = subprocess.run([a.tg_run] + common + [
        "--rpc", ",".join(s.endpoint for s in servers), "-sm", "layer", "--device", devices
    ] + tls, capture_output=True, text=True, env=env, timeout=120)
    tokens = json.loads(r.stdout)["tokens"] if r.returncode == 0 else None
    copied = sum(s.metrics().get("tg_peer_copy_bytes_total", 0) for s in servers) - before
    c.check(tokens == want, f"-sm layer over two mTLS servers: exit {r.returncode}, tokens "
            f"{'identical' if tokens == want else 'DIFFER'} {r.stderr.strip()[-300:]}")
    c.check(copied > 0, f"server-to-server copies: {copied:.0f} bytes")


if __name__ == "__main__":
    sys.exit(main())
