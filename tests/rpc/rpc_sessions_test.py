#!/usr/bin/env python3
"""16 clients at once on one rpc-server, each loading and running the model.

  rpc_sessions_test.py --tg-run PATH --rpc-server PATH --model MODEL [--clients 16]

Every client's 32 greedy tokens must equal local -sm none's; after all have left, the
server's metrics must show zero buffers and zero bytes held, and it must have seen every
session. Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import SKIP, Cluster, local_env, model_missing, model_test_args  # noqa: E402


def main():
    a = model_test_args([("--clients", dict(type=int, default=16)), ("--n", dict(type=int, default=32))])
    if model_missing(a.model):
        return SKIP
    env = local_env()
    common = ["-m", a.model, "-n", str(a.n), "--temp", "0", "--json", "-t", "1"]
    base = subprocess.run([a.tg_run] + common, capture_output=True, text=True, env=env)
    if base.returncode != 0:
        print(f"FAIL: local run: {base.stderr}")
        return 1
    want = json.loads(base.stdout)["tokens"]
    ok = True
    with Cluster(a.rpc_server, n=1, devices=2, extra=["--max-sessions", str(a.clients)]) as c:
        dev = c.remote_devices(0)
        procs = []
        start = time.time()
        for i in range(a.clients):
            # Alternate devices and split modes so both devices are busy at once.
            extra = ["--device", dev[i % 2]] if i % 3 else ["-sm", "layer", "--device", ",".join(dev)]
            procs.append(subprocess.Popen([a.tg_run] + common + ["--rpc", c.endpoints[0]] + extra,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env))
        peak = 0.0
        while any(p.poll() is None for p in procs):
            try:
                peak = max(peak, c.metrics(0).get("tg_sessions_active", 0))
            except OSError:
                pass
            time.sleep(0.02)
        for i, p in enumerate(procs):
            out, err = p.communicate()
            if p.returncode != 0:
                print(f"FAIL: client {i} exited {p.returncode}: {err.strip()[-1500:]}")
                ok = False
            elif json.loads(out)["tokens"] != want:
                print(f"FAIL: client {i} generated different tokens")
                ok = False
        print(f"{a.clients} clients done in {time.time() - start:.2f} s; "
              f"peak active sessions seen {peak:.0f}")
        time.sleep(0.2)  # the server notices closed streams asynchronously.
        m = c.metrics(0)
        for _ in range(50):
            if m.get("tg_buffers") == 0 and m.get("tg_sessions_active") == 0:
                break
            time.sleep(0.1)
            m = c.metrics(0)
        print("metrics after: " + ", ".join(f"{k}={m.get(k)}" for k in
              ["tg_sessions_active", "tg_sessions_total", "tg_buffers", "tg_buffer_bytes"]))
        if m.get("tg_buffers") != 0 or m.get("tg_buffer_bytes") != 0:
            print("FAIL: buffers still held after every client left")
            ok = False
        if m.get("tg_sessions_active") != 0 or m.get("tg_sessions_total", 0) < a.clients:
            print("FAIL: session counts do not add up")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
