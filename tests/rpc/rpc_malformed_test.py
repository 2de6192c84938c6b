#!/usr/bin/env python3
"""The malformed-request catalogue against a real rpc-server while a model runs on it.

  rpc_malformed_test.py --tg-run PATH --rpc-server PATH --client PATH --model MODEL

Starts rpc-server with a bearer token and greedy generations over --rpc, one after another
from a thread; once the first holds a session, runs rpc_malformed_client (every bad request
must get its code), and stops starting generations when it is done. Every generation must
give local -sm none's tokens. So the catalogue runs while generations run, however fast
either is on the machine (one fixed-length generation finished first when CI was busy).
The server has a --model-dir holding a symlink to a model outside it, for the model-file
cases. Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import SKIP, Cluster, local_env, model_missing, model_test_args  # noqa: E402


def main():
    a = model_test_args([("--client", dict(required=True)), ("--n", dict(type=int, default=500))])
    if model_missing(a.model):
        return SKIP
    env = local_env()
    common = ["-m", a.model, "-n", str(a.n), "-c", "4096", "--temp", "0", "--json", "-t", "1"]
    base = subprocess.run([a.tg_run] + common, capture_output=True, text=True, env=env)
    want = json.loads(base.stdout)["tokens"]
    with tempfile.TemporaryDirectory(prefix="tg-malformed-") as d:
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("malformed-suite-token\n")
        models, outside = os.path.join(d, "models"), os.path.join(d, "outside.gguf")
        os.mkdir(models)
        shutil.copyfile(a.model, outside)
        os.symlink(outside, os.path.join(models, "link.gguf"))
        with Cluster(a.rpc_server, n=1, devices=2,
                     extra=["--auth-token-file", token, "--model-dir", models]) as c:
            rpc = ["--rpc", c.endpoints[0], "--rpc-token-file", token]
            gens, catalogue_done = [], threading.Event()

            def generate():
                while True:
                    t0 = time.monotonic()
                    g = subprocess.run([a.tg_run] + common + rpc, capture_output=True,
                                       text=True, env=env, timeout=300)
                    gens.append((g, t0, time.monotonic()))
                    if catalogue_done.is_set():
                        return

            t = threading.Thread(target=generate)
            t.start()
            deadline = time.time() + 60
            while not c.metrics(0).get("tg_sessions_active") and not gens and time.time() < deadline:
                time.sleep(0.01)
            try:
                c0 = time.monotonic()
                bad = subprocess.run([a.client, c.endpoints[0], token, outside],
                                     capture_output=True, text=True)
                c1 = time.monotonic()
            finally:
                catalogue_done.set()
                t.join()
            print(bad.stdout + bad.stderr)
            ok = bad.returncode == 0
            print(f"{len(gens)} generations of {a.n} tokens ran beside the catalogue")
            if not any(t0 < c1 and c0 < t1 for _, t0, t1 in gens):
                print("FAIL: no generation ran while the malformed requests were sent")
                ok = False
            for i, (g, _, _) in enumerate(gens):
                if g.returncode != 0:
                    print(f"FAIL: generation {i} exited {g.returncode}: {g.stderr[-1500:]}")
                    ok = False
                elif json.loads(g.stdout)["tokens"] != want:
                    print(f"FAIL: generation {i}'s tokens differ from local -sm none")
                    ok = False
            m = c.metrics(0)
            print(f"server after: {m.get('tg_sessions_active')} sessions, {m.get('tg_buffers')} buffers")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
