#!/usr/bin/env python3
"""tg-run over --rpc must give local -sm none's greedy tokens and logits.

  rpc_split_test.py --tg-run PATH --rpc-server PATH --model MODEL --mode layer|tensor
                    [--expert-split]
                    [--servers 2] [--local | --default-devices] [--n 64] [--tol 1e-4]

Starts --servers rpc-server processes (each TG_CPU_DEVICES=2, -d 0,1), runs tg-run locally
with -sm none, then with --rpc over every remote device (plus the local CPU with --local;
with --default-devices no --device at all, which must pick the remote devices only)
and -sm MODE. Passes when the 64 greedy tokens are identical and every top-5 logit is within
--tol, and the load report names exactly the devices used, each remote one with its bytes
sent. Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import SKIP, Cluster, local_env, model_missing, model_test_args  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "split"))
import compare_split  # noqa: E402


def tg_run(binary, model, n, extra, env=None):
    cmd = [binary, "-m", model, "-n", str(n), "--temp", "0", "--json", "--top-logits", "5",
           "--kv-type", "f32", "-t", "1"] + extra
    start = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env or dict(os.environ))
    if p.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
        return None
    out = json.loads(p.stdout)
    out["wall_s"] = time.time() - start
    return out


def compare(base, other, tol, label):
    ok, worst = compare_split.top_logits_within(base, other, tol, "-sm none's top-5",
                                                f"{label}'s top-5")
    if base["tokens"] != other["tokens"]:
        print(f"FAIL {label}: greedy tokens differ: {base['tokens'][:12]} vs {other['tokens'][:12]}")
        ok = False
    print(f"{label}: max top-5 |diff| {worst:.2e}, {len(other['tokens'])} tokens "
          f"{'identical' if base['tokens'] == other['tokens'] else 'DIFFER'} "
          f"({other['wall_s']:.2f} s)")
    return ok


def check_placement(out, devices, mode):
    """The JSON load report has one line per device used, and only those: the client's CPU
    only when asked for. Remote devices got their bytes over the network (no cache or
    --model-dir here). Under -sm tensor over remote devices only, the all-reduces ran
    between the servers (no byte through the client); with the CPU, through the client."""
    ok = True
    loads = {d["device"]: d for d in out["load"]["devices"]}
    if sorted(loads) != sorted(devices):
        print(f"FAIL: the load report names {sorted(loads)}, expected {sorted(devices)}")
        ok = False
    for name, d in loads.items():
        if d["bytes"] <= 0:
            print(f"FAIL: {name} loaded no weight byte")
            ok = False
        if name.startswith("RPC[") and d["sent"] != d["bytes"]:
            print(f"FAIL: {name} reports {d['sent']} bytes sent of {d['bytes']}")
            ok = False
    rpc = out["rpc"]
    summary = ", ".join(f"{name} {d['bytes']} B" for name, d in loads.items())
    print(f"load report: {summary}; all-reduce: {rpc}")
    if mode != "tensor":
        return ok
    if not any(name.startswith("CPU") for name in loads):
        if rpc["allreduce_client_bytes"] != 0 or rpc["allreduce_on_servers"] == 0:
            print("FAIL: -sm tensor over remote devices only must all-reduce between the servers")
            ok = False
    elif rpc["allreduce_client_bytes"] == 0 or rpc["allreduce_staged"] == 0:
        # With the client's CPU in the split every all-reduce goes through the client, and
        # the counters must say so.
        print("FAIL: -sm tensor with the local CPU reports no all-reduce through the client")
        ok = False
    return ok


def main():
    a = model_test_args([("--mode", dict(choices=["layer", "tensor"], required=True)),
                         ("--servers", dict(type=int, default=2)),
                         ("--local", dict(action="store_true", help="add the local CPU device")),
                         ("--default-devices", dict(action="store_true",
                                                    help="no --device: the default choice")),
                         ("--expert-split", dict(action="store_true",
                                                 help="-sm tensor with whole experts per device")),
                         ("--n", dict(type=int, default=64)), ("--tol", dict(type=float, default=1e-4))])
    if model_missing(a.model):
        return SKIP
    env = local_env()
    base = tg_run(a.tg_run, a.model, a.n, ["-sm", "none"], env)
    if base is None:
        return 1
    with Cluster(a.rpc_server, n=a.servers, devices=2) as c:
        devices = (["CPU"] if a.local else []) + sum(
            (c.remote_devices(i) for i in range(a.servers)), [])
        extra = ["--rpc", ",".join(c.endpoints), "-sm", a.mode]
        if not a.default_devices:
            extra += ["--device", ",".join(devices)]
        if a.expert_split:
            extra.append("--expert-split")
        out = tg_run(a.tg_run, a.model, a.n, extra, env)
        if out is None:
            for s in c.servers:
                print(f"--- {s.endpoint} log:\n{s.read_log()}")
            return 1
        ok = compare(base, out, a.tol, f"-sm {a.mode} over {','.join(devices)}")
        ok = check_placement(out, devices, a.mode) and ok
        peer = sum(c.metrics(i).get("tg_peer_copy_bytes_total", 0) for i in range(a.servers))
        print(f"server-to-server (PeerCopy) bytes: {peer:.0f}")
        if a.mode == "layer" and a.servers > 1 and not a.local and peer == 0:
            print("FAIL: layer boundaries between servers should travel server to server")
            ok = False
        for i in range(a.servers):
            m = c.metrics(i)
            if m.get("tg_buffers", -1) != 0 or m.get("tg_buffer_bytes", -1) != 0:
                print(f"FAIL: server {i} still holds {m.get('tg_buffers')} buffers, "
                      f"{m.get('tg_buffer_bytes')} bytes after the client left")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
