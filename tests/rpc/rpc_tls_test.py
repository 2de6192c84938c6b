#!/usr/bin/env python3
"""TLS + bearer token: only a client that trusts the CA and has the token runs the model.

  rpc_tls_test.py --tg-run PATH --rpc-server PATH --model MODEL

Makes a CA, a server certificate for 127.0.0.1 and a second, untrusted CA with openssl,
starts rpc-server with --tls-cert/--tls-key/--auth-token-file and checks: the right CA and
token give local -sm none's tokens; no token, a wrong token, the untrusted CA and a plaintext
client are refused with a clear error. Also: binding 0.0.0.0 without TLS and a token needs
--insecure. Exit 0 pass, 1 fail, 77 skipped (model or openssl missing).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import (SKIP, Cluster, Failures, local_env, model_missing,  # noqa: E402
                         model_test_args, openssl_missing)


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    for ca in ["ca", "other-ca"]:
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                f"/CN=tensorgrid test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
            "server.key", "-out", "server.csr", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=d)
    with open(os.path.join(d, "token"), "w") as f:
        f.write("s3cret-token-for-tests\n")
    with open(os.path.join(d, "wrong-token"), "w") as f:
        f.write("not-the-token\n")


def main():
    a = model_test_args()
    if model_missing(a.model) or openssl_missing():
        return SKIP
    env = local_env()
    common = ["-m", a.model, "-n", "16", "--temp", "0", "--json", "-t", "1"]
    base = subprocess.run([a.tg_run] + common, capture_output=True, text=True, env=env)
    want = json.loads(base.stdout)["tokens"]
    fail = Failures()
    with tempfile.TemporaryDirectory(prefix="tg-tls-") as d:
        make_pki(d)
        p = lambda name: os.path.join(d, name)  # noqa: E731

        # A public bind without TLS and a token is refused unless --insecure.
        r = subprocess.run([a.rpc_server, "-H", "0.0.0.0", "-p", "0"], capture_output=True,
                           text=True, timeout=30)
        print(f"0.0.0.0 without TLS: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        if r.returncode == 0 or "--insecure" not in r.stderr:
            fail("a non-loopback bind without TLS and a token must need --insecure")

        extra = ["--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
                 "--auth-token-file", p("token")]
        with Cluster(a.rpc_server, n=1, devices=1, extra=extra) as c:
            rpc = ["--rpc", c.endpoints[0]]
            cases = [
                ("trusted CA + token", ["--rpc-tls-ca", p("ca.pem"), "--rpc-token-file", p("token")], True),
                ("no token", ["--rpc-tls-ca", p("ca.pem")], False),
                ("wrong token", ["--rpc-tls-ca", p("ca.pem"), "--rpc-token-file", p("wrong-token")], False),
                ("untrusted CA", ["--rpc-tls-ca", p("other-ca.pem"), "--rpc-token-file", p("token")], False),
                ("plaintext", ["--rpc-token-file", p("token")], False),
            ]
            # A refused client may leave gRPC's TLS object behind; see lsan_refused_tls.supp.
            supp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lsan_refused_tls.supp")
            refused_env = dict(env, LSAN_OPTIONS=f"suppressions={supp}:print_suppressions=0")
            for label, flags, should_work in cases:
                r = subprocess.run([a.tg_run] + common + rpc + flags, capture_output=True,
                                   text=True, env=env if should_work else refused_env,
                                   timeout=60)
                err = r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else []
                print(f"{label}: exit {r.returncode} {err}")
                if should_work:
                    if r.returncode != 0 or json.loads(r.stdout)["tokens"] != want:
                        fail(f"{label} should run the model: {r.stderr[-800:]}")
                elif r.returncode == 0 or not err or c.endpoints[0] not in err[0]:
                    fail(f"{label} should be refused with an error naming the server; "
                         f"its stderr:\n{r.stderr[-6000:]}")
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
