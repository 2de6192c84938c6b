#!/usr/bin/env python3
"""kill -9 of an rpc-server during generation, then a restart on the same --cache.

  rpc_kill_test.py --tg-run PATH --rpc-server PATH --model MODEL

1. A server with --cache DIR; tg-run streams a long generation over --rpc; once text
   appears the server gets SIGKILL. tg-run must exit non-zero within 5 s with one clear
   message naming the server.
2. A new server on the same --cache DIR; a second tg-run must upload no weight bytes (the
   server's tg_upload_bytes_total stays 0, tg_cache_hit_bytes_total counts the weights),
   and still generate local -sm none's tokens.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import SKIP, Cluster, exit_after, local_env, model_missing, model_test_args  # noqa: E402


def main():
    a = model_test_args()
    if model_missing(a.model):
        return SKIP
    env = local_env()
    ok = True
    with tempfile.TemporaryDirectory(prefix="tg-cache-") as cache:
        with Cluster(a.rpc_server, n=1, devices=2, extra=["--cache", cache]) as c:
            cmd = [a.tg_run, "-m", a.model, "-n", "4000", "-c", "4096",
                   "--temp", "0", "-t", "1", "--rpc", c.endpoints[0], "-p", "Once upon a time"]
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            first = p.stdout.read(16)  # generation has started.
            if p.poll() is not None:
                print(f"FAIL: tg-run ended before the kill: {p.stderr.read().decode()[-1500:]}")
                return 1
            m = c.metrics(0)
            print(f"before the kill: uploaded {m.get('tg_upload_bytes_total')} bytes, "
                  f"cache hits {m.get('tg_cache_hit_bytes_total')} bytes; output {first!r}")
            ended = exit_after(p, lambda: c.kill(0))
            if ended is None:
                print("FAIL: tg-run hangs after the server died")
                return 1
            err, took = ended
            lines = [l for l in err.splitlines() if l.strip() and not l.startswith("upload ")]
            print(f"tg-run exited {p.returncode} {took:.2f} s after the kill: {lines[-1:]!r}")
            if p.returncode == 0 or took > 5:
                print("FAIL: want a non-zero exit within 5 s")
                ok = False
            if not lines or c.endpoints[0] not in lines[-1]:
                print("FAIL: the last error line should name the server")
                ok = False
        with Cluster(a.rpc_server, n=1, devices=2, extra=["--cache", cache]) as c:
            cmd = [a.tg_run, "-m", a.model, "-n", "16", "--temp", "0", "-t", "1", "--json",
                   "--rpc", c.endpoints[0]]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            base = subprocess.run([a.tg_run, "-m", a.model, "-n", "16", "--temp", "0", "-t", "1",
                                   "--json"], capture_output=True, text=True, env=env)
            m = c.metrics(0)
            print(f"after the restart: uploaded {m.get('tg_upload_bytes_total')} bytes, "
                  f"cache hits {m.get('tg_cache_hit_bytes_total')} bytes")
            if r.returncode != 0:
                print(f"FAIL: second run: {r.stderr[-1500:]}")
                return 1
            if json.loads(r.stdout)["tokens"] != json.loads(base.stdout)["tokens"]:
                print("FAIL: second run's tokens differ from local -sm none")
                ok = False
            if m.get("tg_upload_bytes_total") != 0 or not m.get("tg_cache_hit_bytes_total"):
                print("FAIL: the restarted server should take every weight from its cache")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
