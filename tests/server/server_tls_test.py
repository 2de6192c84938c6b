#!/usr/bin/env python3
"""tg-server over HTTPS (--ssl-cert/--ssl-key) with curl, and its latency histograms:

  server_tls_test.py --tg-server BIN --tg-run BIN --model MODEL

- a root CA, an intermediate and a certificate for 127.0.0.1 made here with openssl;
  tg-server serves HTTPS with the certificate and the intermediate after it: curl --cacert
  (the root) gets, for 5 prompts at temperature 0, the texts a second tg-server
  gives over plain HTTP (and the first equals tg-run's); streamed over HTTPS, the deltas add
  up to the same text;
- a plain-HTTP request to the HTTPS port gets no HTTP answer; a client gone mid-stream over
  TLS leaves the server serving;
- GET /metrics after those 5 completions (max_tokens 8): time to first token counts 5,
  time per output token counts the generated tokens minus 5 (the gaps), each histogram's
  buckets are cumulative, non-decreasing and end in +Inf == _count, and _sum is > 0 and below
  the wall time the requests took;
- a missing certificate, a key that is not the certificate's, a certificate file holding no
  certificate: tg-server exits 1 naming the file; --ssl-cert alone is a usage error (2)
  naming --ssl-key.
Skipped (77), saying why, without openssl or curl. One line per check, then "N passed, M
failed".
"""
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_test import PROMPTS, Server, parse_args, tg_run  # noqa: E402

N_REQUESTS = 5
MAX_TOKENS = 8
TTFT = "tg_server_time_to_first_token_seconds"
TPOT = "tg_server_time_per_output_token_seconds"


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True,
                   timeout=60)


def make_certs(d):
    """ca.pem, a root CA; chain.pem: the certificate for IP 127.0.0.1, then the intermediate CA
    that signed it (the root signed that); server.key its key; other.key an unrelated key."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj",
            "/CN=tg-server test root CA", cwd=d)
    with open(os.path.join(d, "int.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    for name, cn, ca in (("int", "tg-server test intermediate CA", "ca"),
                         ("server", "127.0.0.1", "int")):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN={cn}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile",
                f"{name}.ext", cwd=d)
    with open(os.path.join(d, "chain.pem"), "w") as out:
        for name in ("server", "int"):
            with open(os.path.join(d, f"{name}.pem")) as f:
                out.write(f.read())
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out",
            "other.key", cwd=d)


def curl(*args):
    """curl's exit status, body and HTTP status (0 when no HTTP answer came)."""
    p = subprocess.run(["curl", "-sS", "--max-time", "120", "-w", "\n%{http_code}"] +
                       list(args), capture_output=True, text=True, timeout=180)
    body, _, code = p.stdout.rpartition("\n")
    return p.returncode, body, int(code or 0), p.stderr.strip()


def curl_complete(url, ca, body):
    rc, out, code, err = curl("--cacert", ca, "-H", "Content-Type: application/json",
                              "-d", json.dumps(body), f"{url}/v1/completions")
    if rc != 0 or code != 200:
        return None, f"curl rc {rc}, HTTP {code}: {err or out[:100]}"
    return json.loads(out), ""


def histogram(metrics, name):
    """{le: count} in the order written, _sum and _count of histogram `name`."""
    buckets = [(m.group(1), float(m.group(2))) for m in
               re.finditer(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', metrics, re.M)]
    total = re.search(rf"^{name}_sum (\S+)$", metrics, re.M)
    count = re.search(rf"^{name}_count (\S+)$", metrics, re.M)
    return (buckets, float(total.group(1)) if total else None,
            float(count.group(1)) if count else None)


def well_formed(buckets, count):
    """Cumulative: bounds increasing, counts non-decreasing, +Inf last and == _count."""
    if len(buckets) < 2 or buckets[-1][0] != "+Inf" or count is None:
        return False
    bounds = [float(le) for le, _ in buckets[:-1]]
    counts = [c for _, c in buckets]
    return (bounds == sorted(bounds) and len(set(bounds)) == len(bounds) and
            bounds[0] <= 0.001 and bounds[-1] >= 60 and
            all(a <= b for a, b in zip(counts, counts[1:])) and counts[-1] == count)


def start_fails(a, extra):
    p = subprocess.run([a.tg_server, "-m", a.model, "--port", "0", "-t", "1"] + extra,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stderr.strip()


def main():
    a = parse_args()
    if not os.path.exists(a.model):
        print(f"skipped: model {a.model} not found")
        return 77
    for tool in ("openssl", "curl"):
        if shutil.which(tool) is None:
            print(f"skipped: {tool} is not installed (the test makes its certificates with "
                  "openssl and talks HTTPS with curl)")
            return 77
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        ok = bool(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        passed, failed = passed + ok, failed + (not ok)

    d = tempfile.mkdtemp()
    make_certs(d)
    # The root alone is trusted: the server must send the intermediate after its certificate.
    ca, cert, key = (os.path.join(d, f) for f in ("ca.pem", "chain.pem", "server.key"))
    plain = Server(a.tg_server, a.model, ["--parallel", "4"])
    tls = Server(a.tg_server, a.model, ["--parallel", "4", "--ssl-cert", cert, "--ssl-key", key],
                 tls_ca=ca)
    try:
        check("listening on https://127.0.0.1:" in tls.read_log(),
              "the start-up line says https")
        rc, _, code, err = curl("--cacert", ca, f"{tls.url}/health")
        check(rc == 0 and code == 200, f"curl --cacert ROOT: /health HTTP {code} {err}")
        # The leaf alone (no intermediate) must not verify against the root: the chain matters.
        leaf = os.path.join(d, "server.pem")
        trust_leaf = ssl.create_default_context(cafile=leaf)  # for the helper's /health only.
        trust_leaf.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        leaf_only = Server(a.tg_server, a.model, ["--ssl-cert", leaf, "--ssl-key", key],
                           tls_ca=trust_leaf)
        try:
            rc, _, code, err = curl("--cacert", ca, f"{leaf_only.url}/health")
            check(rc != 0 and code == 0, f"without the intermediate curl refuses: {err[:70]}")
        finally:
            leaf_only.stop()
        # The histograms' subject: N completions over HTTPS, one after another, timed.
        bodies = [{"prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0}
                  for p in PROMPTS[:N_REQUESTS]]
        answers = []
        started = time.monotonic()
        for body in bodies:
            answers.append(curl_complete(tls.url, ca, body))
        wall = time.monotonic() - started
        metrics = tls.get("/metrics")[1]
        for body, (answer, err) in zip(bodies, answers):
            status, text = plain.post("/v1/completions", body)
            want = json.loads(text)["choices"][0]["text"] if status == 200 else f"HTTP {status}"
            got = answer["choices"][0]["text"] if answer else err
            check(answer is not None and got == want and want,
                  f"HTTPS (curl --cacert) = plain HTTP for {body['prompt']!r}: {got!r}")
        want = tg_run(a.tg_run, a.model, PROMPTS[0], MAX_TOKENS, ["--temp", "0"])
        got = answers[0][0]["choices"][0]["text"] if answers[0][0] else answers[0][1]
        check(got == want, f"HTTPS completion = tg-run's: {got!r}")

        # Latency histograms over those N requests (nothing else has run on this server).
        tokens = [ans["usage"]["completion_tokens"] if ans else 0 for ans, _ in answers]
        generated = re.search(r"^tg_server_generated_tokens_total (\d+)$", metrics, re.M)
        check(generated is not None and int(generated.group(1)) == sum(tokens) and
              all(t >= 1 for t in tokens),
              f"{N_REQUESTS} requests generated {tokens} tokens (generated_tokens_total agrees)")
        sums = 0.0
        for name, want_count in ((TTFT, N_REQUESTS), (TPOT, sum(tokens) - N_REQUESTS)):
            buckets, total, count = histogram(metrics, name)
            check(f"# TYPE {name} histogram" in metrics and count == want_count,
                  f"{name}_count {count} == {want_count}")
            check(well_formed(buckets, count),
                  f"{name}: {len(buckets)} buckets, cumulative, +Inf == _count: "
                  f"{[c for _, c in buckets]}")
            check(total is not None and 0 < total < wall,
                  f"{name}_sum {total} in (0, {wall:.3f} s wall)")
            sums += total or 0
        # Sequential requests: each one's first-token time and gaps lie within its own time.
        check(sums < wall, f"first-token and between-token sums {sums:.4f} s < {wall:.3f} s wall")

        # Streamed over HTTPS (curl -N): the deltas add up to the whole answer.
        rc, out, code, err = curl("-N", "--cacert", ca, "-H", "Content-Type: application/json",
                                  "-d", json.dumps(dict(bodies[0], stream=True)),
                                  f"{tls.url}/v1/completions")
        events = [line[6:] for line in out.splitlines() if line.startswith("data: ")]
        deltas = "".join(json.loads(e)["choices"][0]["text"] for e in events if e != "[DONE]")
        check(rc == 0 and events[-1:] == ["[DONE]"] and deltas == got,
              f"streamed over HTTPS: {len(events)} events add up to the text")

        # Plain HTTP to the HTTPS port: no HTTP answer (the TLS handshake fails).
        rc, out, code, err = curl(f"http://127.0.0.1:{tls.port}/health")
        check(rc != 0 and code == 0, f"plain HTTP to the HTTPS port fails: curl rc {rc} ({err})")

        # A client gone mid-stream over TLS (the server's next write fails; no SIGPIPE death).
        raw = socket.create_connection(("127.0.0.1", tls.port), timeout=30)
        conn = ssl.create_default_context(cafile=ca).wrap_socket(raw,
                                                                 server_hostname="127.0.0.1")
        # Greedy, this prompt runs to max_tokens (no end-of-text): seconds of writes to come.
        body = json.dumps({"prompt": PROMPTS[0], "max_tokens": 3000, "temperature": 0,
                           "stream": True}).encode()
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        first = conn.recv(4096)
        conn.close()
        time.sleep(0.5)
        status, health = tls.get("/health")
        answer, err = curl_complete(tls.url, ca, bodies[1])
        check(first.startswith(b"HTTP/1.1 200") and tls.proc.poll() is None and status == 200 and
              answer is not None and answer["choices"][0]["text"] == answers[1][0]["choices"][0]
              ["text"], f"serving on after a client left mid-stream (HTTP {status})")
    finally:
        tls.stop()
        plain.stop()

    # Start-up errors name the file (exit 1); one flag of the pair alone is a usage error (2).
    missing = os.path.join(d, "missing.pem")
    for extra, code, needle, what in [
            (["--ssl-cert", missing, "--ssl-key", key], 1, missing, "a missing certificate"),
            (["--ssl-cert", cert, "--ssl-key", os.path.join(d, "other.key")], 1,
             os.path.join(d, "other.key"), "a key that is not the certificate's"),
            (["--ssl-cert", key, "--ssl-key", key], 1, key, "a certificate file with no "
             "certificate"),
            (["--ssl-cert", cert], 2, "--ssl-key", "--ssl-cert without --ssl-key")]:
        rc, err = start_fails(a, extra)
        check(rc == code and needle in err, f"{what}: exit {rc}, {err[-150:]!r}")
    shutil.rmtree(d, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
