#!/usr/bin/env python3
"""The malformed-request catalogue against a real rpc-server while a model runs on it.

  rpc_malformed_test.py --tg-run PATH --rpc-server PATH --client PATH --model MODEL

Starts rpc-server with a bearer token, starts a long greedy generation over --rpc, runs
rpc_malformed_client (every bad request must get its code) while the generation is in
flight, then checks that the generation finished with local -sm none's tokens. The server
has a --model-dir holding a symlink to a model outside it, for the model-file cases.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import SKIP, Cluster, local_env, model_missing, model_test_args  # noqa: E402


def main():
    a = model_test_args([("--client", dict(required=True)), ("--n", dict(type=int, default=3000))])
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
            gen = subprocess.Popen([a.tg_run] + common + ["--rpc", c.endpoints[0],
                                   "--rpc-token-file", token], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env)
            bad = subprocess.run([a.client, c.endpoints[0], token, outside], capture_output=True,
                                 text=True)
            running = gen.poll() is None
            print(bad.stdout + bad.stderr)
            out, err = gen.communicate(timeout=300)
            ok = bad.returncode == 0
            print(f"generation was {'still running' if running else 'ALREADY DONE'} when the "
                  f"catalogue finished; it exited {gen.returncode}")
            if gen.returncode != 0:
                print(f"FAIL: the concurrent generation failed: {err[-1500:]}")
                ok = False
            elif json.loads(out)["tokens"] != want:
                print("FAIL: the concurrent generation's tokens differ from local -sm none")
                ok = False
            if not running:
                print("FAIL: the generation should overlap the malformed requests (make --n larger)")
                ok = False
            m = c.metrics(0)
            print(f"server after: {m.get('tg_sessions_active')} sessions, {m.get('tg_buffers')} buffers")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
