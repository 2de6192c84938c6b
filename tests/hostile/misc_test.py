"""The smaller holes of issue 37, each against a real rpc-server (--case NAME):

  metrics_auth      /metrics with --metrics-token-file: 401 without the token, 200 with it.
  metrics_halfopen  8 TCP connections to the metrics port that send nothing: a scrape still
                    answers within 2 s, and tg-run (hostile.Honest) beside them.
  fifo_cache        a FIFO put under a cached blob's name does not stall the next load (the
                    server opens blobs without blocking and takes only regular files).
  truncated_blob    a blob cut short while the server is down is dropped at start-up: the next
                    load uploads it once, the one after uploads nothing.
  cache_privacy     a session that knows only a cached piece's SHA-256 gets `send` from
                    FillPieces and Upload, never the bytes; the honest reload still sends 0.
                    An honest tg-run (hostile.Honest) runs beside the attacker's session, and
                    every counter is back to its baseline (hostile.Baseline) once it ends.
  loopback_name     -H 127.evil.example is not loopback: refused without TLS, a token or
                    --insecure (a "127." prefix used to be enough).
"""
import hashlib
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import hostile as H

CASES = ["metrics_auth", "metrics_halfopen", "fifo_cache", "truncated_blob", "cache_privacy",
         "loopback_name"]


def scrape(srv, token=None, timeout=5):
    """(HTTP status, body) of GET /metrics."""
    req = urllib.request.Request(f"http://127.0.0.1:{srv.metrics_port}/metrics")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def blobs(cache_dir):
    """[(path, size)] of the blobs in a cache directory."""
    out = []
    for sub in sorted(os.listdir(cache_dir)):
        d = os.path.join(cache_dir, sub)
        if len(sub) == 2 and os.path.isdir(d):
            for name in sorted(os.listdir(d)):
                if len(name) == 64:
                    out.append((os.path.join(d, name), os.path.getsize(os.path.join(d, name))))
    return out


def load(args, srv, f, what, timeout=120):
    """An honest tg-run over the server; returns the bytes it uploaded (the server's counter)."""
    before = srv.metrics().get("tg_upload_bytes_total", 0)
    toks, dt, err = H.tg_run(args, rpc=[srv.endpoint], timeout=timeout)
    f.check(toks is not None, f"{what}: tg-run failed: {err[-800:]}")
    after = srv.metrics().get("tg_upload_bytes_total", 0)
    print(f"{what}: {dt:.1f} s, uploaded {after - before:.0f} bytes")
    return after - before, dt


def case_metrics_auth(args, work, f):
    token_file = os.path.join(work, "metrics.token")
    with open(token_file, "w") as t:
        t.write("m3trics\n")
    srv = H.start_server(args, work, extra=["--metrics-token-file", token_file])
    try:
        code, _ = scrape(srv)
        f.check(code == 401, f"/metrics without the token: {code}, want 401")
        code, _ = scrape(srv, token="wrong")
        f.check(code == 401, f"/metrics with a wrong token: {code}, want 401")
        code, body = scrape(srv, token="m3trics")
        f.check(code == 200 and "tg_sessions_total" in body, f"/metrics with the token: {code}")
    finally:
        srv.stop()


def case_metrics_halfopen(args, work, f):
    srv = H.start_server(args, work)
    partner = H.start_server(args, work, index=1)
    idle = []
    try:
        honest = H.Honest(args, srv, partner)
        honest.calm(f)
        baseline = H.Baseline(srv)
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", srv.metrics_port), timeout=5)
            idle.append(s)
        time.sleep(0.2)
        t0 = time.time()
        code, body = scrape(srv, timeout=10)
        dt = time.time() - t0
        print(f"scrape beside 8 half-open connections: {code} in {dt:.2f} s")
        f.check(code == 200 and "tg_sessions_total" in body, f"scrape answered {code}")
        f.check(dt < 2, f"scrape took {dt:.2f} s beside 8 half-open connections (limit 2 s)")
        honest.beside(f, "8 half-open metrics connections")
        for s in idle:
            s.close()
        idle = []
        f.check(baseline.restored(), "counters not back to their baseline within 5 s of the "
                                     "half-open connections closing")
        honest.calm(f)
        honest.check(f)
    finally:
        for s in idle:
            s.close()
        srv.stop()
        partner.stop()


def case_fifo_cache(args, work, f):
    cache = os.path.join(work, "cache")
    srv = H.start_server(args, work, extra=["--cache", cache])
    try:
        load(args, srv, f, "first load (fills the cache)")
        found = blobs(cache)
        f.check(found, "no blob in the cache after a load")
        if not found:
            return
        path = max(found, key=lambda b: b[1])[0]
        os.remove(path)
        os.mkfifo(path)
        baseline = H.Baseline(srv)
        _, dt = load(args, srv, f, "load with a FIFO under a blob's name", timeout=60)
        f.check(baseline.restored(), "counters not back to their baseline within 5 s of the "
                                     "load beside the FIFO")
        f.check(dt < 30, f"the load took {dt:.1f} s: the FIFO stalled it")
        f.check(not os.path.exists(path) or not stat.S_ISFIFO(os.stat(path).st_mode),
              "the FIFO is still under the blob's name")
        uploaded, _ = load(args, srv, f, "load after that")
        f.check(uploaded == 0, f"the blob was not stored again: {uploaded:.0f} bytes uploaded")
    finally:
        srv.stop()


def case_truncated_blob(args, work, f):
    cache = os.path.join(work, "cache")
    srv = H.start_server(args, work, extra=["--cache", cache])
    try:
        load(args, srv, f, "first load (fills the cache)")
    finally:
        srv.stop()
    found = blobs(cache)
    f.check(found, "no blob in the cache after a load")
    if not found:
        return
    path, size = max(found, key=lambda b: b[1])
    os.truncate(path, size // 2)
    srv = H.start_server(args, work, index=1, extra=["--cache", cache])
    try:
        uploaded, _ = load(args, srv, f, "load after the blob was cut short")
        f.check(0 < uploaded, "nothing uploaded: the cut blob cannot have served the load")
        uploaded, _ = load(args, srv, f, "the next load")
        f.check(uploaded == 0, f"the cut blob was never repaired: {uploaded:.0f} bytes uploaded "
                               "again")
        f.check(os.path.getsize(path) == size, f"{path} has {os.path.getsize(path)} bytes, "
                                               f"not {size}")
    finally:
        srv.stop()


def case_cache_privacy(args, work, f):
    cache = os.path.join(work, "cache")
    srv = H.start_server(args, work, extra=["--cache", cache])
    partner = H.start_server(args, work, index=1)
    try:
        load(args, srv, f, "the victim's load (fills the cache)")
        honest = H.Honest(args, srv, partner)
        honest.calm(f)
        baseline = H.Baseline(srv)
        path, size = max(blobs(cache), key=lambda b: b[1])
        secret = open(path, "rb").read()
        digest = bytes.fromhex(os.path.basename(path))
        with H.Client(srv.endpoint) as c, c.session() as s:
            code, msg, h = s.alloc(0, size)
            f.check(code == 0, f"alloc: {code} {msg}")
            hdr = H.pb.UploadHeader(buffer=h, offset=0, size=size, sha256=digest)
            reply = c.stub.FillPieces(H.pb.FillPiecesRequest(session_id=s.id, pieces=[hdr]),
                                      timeout=30)
            f.check(not reply.results[0].have_it,
                    "FillPieces filled another session's cached bytes from their hash alone")
            # A made-up proof does no better.
            hdr.cache_proof = hashlib.sha256(b"guess").digest()
            reply = c.stub.FillPieces(H.pb.FillPiecesRequest(session_id=s.id, pieces=[hdr]),
                                      timeout=30)
            f.check(not reply.results[0].have_it, "FillPieces took a made-up proof")
            # Upload: the header alone, then nothing.
            call = c.raw_stream_stream("Upload")
            header = H.pb.UploadMessage(header=H.pb.UploadHeader(
                session_id=s.id, buffer=h, offset=0, size=size, sha256=digest))
            replies = call(iter([header.SerializeToString()]), metadata=c.metadata, timeout=30)
            try:
                first = H.pb.UploadReply.FromString(next(replies))
                f.check(not first.have_it, "Upload answered have_it to the hash alone")
            except Exception as e:  # noqa: BLE001 - ends short: fine, it got nothing
                print(f"upload of the header alone ended: {e}")
            got = b"".join(ch.data for ch in c.stub.Download(
                H.pb.DownloadRequest(session_id=s.id, range=H.pb.Range(buffer=h, size=size)),
                metadata=c.metadata, timeout=30))
            f.check(got != secret, "the attacker's Download returned the victim's cached bytes")
            f.check(got == bytes(size), "the attacker's buffer is not all zeros")
            honest.beside(f, "a session probing the cache by hash")
        f.check(baseline.restored(), "counters not back to their baseline within 5 s of the "
                                     "attacker's session closing")
        honest.calm(f)
        honest.check(f)
        uploaded, _ = load(args, srv, f, "the honest reload")
        f.check(uploaded == 0, f"the honest reload uploaded {uploaded:.0f} bytes, want 0")
    finally:
        srv.stop()
        partner.stop()


def case_loopback_name(args, work, f):
    for host in ["127.evil.example", "127.0.0.1.evil.example"]:
        r = subprocess.run([args.rpc_server, "-H", host, "-p", "0"], capture_output=True,
                           text=True, timeout=30, env=H.local_env())
        print(f"-H {host}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        f.check(r.returncode != 0 and "refusing to listen" in r.stderr,
                f"-H {host} was not refused as a non-loopback address without TLS and a token")


def main():
    args = H.parse_args([("--case", {"required": True, "choices": CASES})])
    f = H.Failures()
    with tempfile.TemporaryDirectory(prefix="tg-misc-") as work:
        globals()[f"case_{args.case}"](args, work, f)
    return f.exit_code()


if __name__ == "__main__":
    sys.exit(main())
