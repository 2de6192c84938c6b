#!/usr/bin/env python3
"""rpc-server --model-dir under every split mode, with real processes on loopback.

  rpc_model_dir_split_test.py --tg-run PATH --rpc-server PATH --tg-gguf PATH --model MODEL

The servers' --model-dir holds a copy of the model. tg-run over --rpc must give local -sm
none's greedy tokens while no weight byte crosses the network (tg_upload_bytes_total 0 on
every server, and the servers' tg_model_file_bytes_total together what tg-run's load report
says each device got):
  -sm tensor over two devices of one server (each device's slice of a weight: a sub-range
  of the file, or rows of it for a cut along the inner dimension, which the server cuts
  from the pieces of its own copy);
  -sm tensor over one device each of two servers;
  -sm none, layer and tensor again with a .tghash sidecar beside the client's model: its
  hashes name the pieces (tg-run's load report: 0 bytes hashed on every device, where the
  runs without it hash what they ask for) and tg-run does not warn about it.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import SKIP, Cluster, Failures, local_env, model_missing, model_test_args  # noqa: E402


def wait_indexed(c, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(c.metrics(i).get("tg_model_dir_files", 0) >= 1 and
               "index ready" in s.read_log() for i, s in enumerate(c.servers)):
            return True
        time.sleep(0.05)
    return False


def tg_run(a, model, extra, env):
    r = subprocess.run([a.tg_run, "-m", model, "-n", "24", "--temp", "0", "--json", "-t", "1"] +
                       extra, capture_output=True, text=True, env=env)
    return r, (json.loads(r.stdout) if r.returncode == 0 else None)


def case(a, fail, model, want, name, servers, devices, mode, model_dir, env, sidecar=False):
    with Cluster(a.rpc_server, n=servers, devices=devices,
                 extra=["--model-dir", model_dir]) as c:
        if not wait_indexed(c):
            fail(f"{name}: the index never became ready")
            return
        used = sum((c.remote_devices(i) for i in range(servers)), [])
        r, out = tg_run(a, model, ["--rpc", ",".join(c.endpoints), "-sm", mode,
                                   "--device", ",".join(used)], env)
        if out is None:
            fail(f"{name}: tg-run failed: {r.stderr[-1500:]}")
            return
        sent = sum(c.metrics(i).get("tg_upload_bytes_total", -1) for i in range(servers))
        read = sum(c.metrics(i).get("tg_model_file_bytes_total", 0) for i in range(servers))
        loads = out["load"]["devices"]
        got = sum(d["bytes"] for d in loads)
        from_file = sum(d["from_file"] for d in loads)
        hashed = sum(d["hashed"] for d in loads)
        print(f"{name}: {len(loads)} devices loaded {got} bytes; uploaded {sent:.0f}, read by "
              f"the servers from their files {read:.0f} (tg-run says {from_file}); hashed by "
              f"tg-run {hashed}")
        if sidecar:
            fail.check(hashed == 0, f"{name}: tg-run hashed {hashed} bytes: the sidecar's "
                                    "hashes were not used")
        else:
            fail.check(hashed > 0, f"{name}: tg-run hashed nothing without a sidecar (the "
                                   "load report's hashed count is broken)")
        fail.check(out["tokens"] == want, f"{name}: tokens differ from local -sm none")
        fail.check(sent == 0, f"{name}: {sent:.0f} weight bytes were uploaded, want 0")
        fail.check(got > 0 and read == got and from_file == got,
                   f"{name}: every loaded byte should come from the servers' files")
        fail.check(sorted(d["device"] for d in loads) == sorted(used),
                   f"{name}: the load report should name {used}")
        fail.check("hashing the model instead" not in r.stderr and "stale" not in r.stderr,
                   f"{name}: tg-run warned about the sidecar: {r.stderr[-500:]}")


def main():
    a = model_test_args([("--tg-gguf", dict(required=True))])
    if model_missing(a.model):
        return SKIP
    env = local_env()
    fail = Failures()
    base = subprocess.run([a.tg_run, "-m", a.model, "-n", "24", "--temp", "0", "--json", "-t",
                           "1", "-sm", "none"], capture_output=True, text=True, env=env)
    want = json.loads(base.stdout)["tokens"]
    with tempfile.TemporaryDirectory(prefix="tg-model-dir-split-") as d:
        served = os.path.join(d, "served")
        os.makedirs(served)
        shutil.copyfile(a.model, os.path.join(served, "model.gguf"))
        client = os.path.join(d, "client")
        os.makedirs(client)
        model = os.path.join(client, "model.gguf")
        shutil.copyfile(a.model, model)
        case(a, fail, model, want, "-sm tensor, one server's two devices", 1, 2, "tensor",
             served, env)
        case(a, fail, model, want, "-sm tensor, two servers", 2, 1, "tensor", served, env)
        h = subprocess.run([a.tg_gguf, "hash", model], capture_output=True, text=True)
        fail.check(h.returncode == 0 and os.path.exists(model + ".tghash"),
                   f"tg-gguf hash: {h.stderr[-500:]}")
        for mode in ("none", "layer", "tensor"):
            devices = 1 if mode == "none" else 2
            case(a, fail, model, want, f"sidecar, -sm {mode}", 1, devices, mode, served, env,
                 sidecar=True)
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
