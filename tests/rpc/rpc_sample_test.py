#!/usr/bin/env python3
"""Sampling on the device: tg-run --temp T --seed S gives the same tokens locally, through one
rpc-server and over two rpc-servers with -sm layer.

  rpc_sample_test.py --tg-run PATH --rpc-server PATH --model MODEL [--n 64]
                     [--sample "--temp 0.8 --seed 7"]

SAMPLE draws each token from a counter-based generator of (seed, position) on whichever device
holds the output head, so where it runs must not change the tokens. Runs tg-run locally, then
with --rpc on one server (TG_CPU_DEVICES=1) and on two with -sm layer; passes when all three
give the same tokens, those differ from the greedy ones (so a draw was made), every server
computed graphs, and each server holds no buffers after its client left.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import (SKIP, Cluster, Failures, local_env, model_missing,  # noqa: E402
                         model_test_args)


def tg_run(binary, model, n, sample, extra, env):
    cmd = [binary, "-m", model, "-n", str(n), "--json", "-t", "1"] + sample + extra
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
        return None
    return json.loads(p.stdout)["tokens"]


def remote_run(a, sample, servers, mode, env):
    """tg-run over `servers` rpc-servers of one device each; the tokens, or None."""
    with Cluster(a.rpc_server, n=servers, devices=1) as c:
        devices = sum((c.remote_devices(i) for i in range(servers)), [])
        extra = ["--rpc", ",".join(c.endpoints), "-sm", mode, "--device", ",".join(devices)]
        tokens = tg_run(a.tg_run, a.model, a.n, sample, extra, env)
        ok = tokens is not None
        for i in range(servers):
            m = c.metrics(i)
            if m.get("tg_compute_total", 0) == 0:
                print(f"FAIL: server {i} computed nothing: the run did not use it")
                ok = False
        if not ok:
            for s in c.servers:
                print(f"--- {s.endpoint} log:\n{s.read_log()}")
            return None
        for i in range(servers):
            m = c.metrics(i)
            if m.get("tg_buffers", -1) != 0:
                print(f"FAIL: server {i} still holds {m.get('tg_buffers')} buffers")
                return None
        return tokens


def main():
    a = model_test_args([("--n", dict(type=int, default=64)),
                         ("--sample", dict(default="--temp 0.8 --seed 7"))])
    if model_missing(a.model):
        return SKIP
    env = local_env()
    sample = shlex.split(a.sample)
    local = tg_run(a.tg_run, a.model, a.n, sample, ["-sm", "none"], env)
    greedy = tg_run(a.tg_run, a.model, a.n, ["--temp", "0"], ["-sm", "none"], env)
    if local is None or greedy is None:
        return 1
    fail = Failures()
    if local == greedy:
        fail(f"{a.sample} gave the greedy tokens: nothing was drawn")
    for label, servers, mode in [("one rpc-server", 1, "none"),
                                 ("two rpc-servers, -sm layer", 2, "layer")]:
        tokens = remote_run(a, sample, servers, mode, env)
        if tokens is None:
            return 1
        same = tokens == local
        print(f"{a.sample}, {label}: {len(tokens)} tokens {'identical' if same else 'DIFFER'}")
        if not same:
            first = next(i for i, (x, y) in enumerate(zip(local + [None], tokens + [None]))
                         if x != y)
            fail(f"differ at {first}: local {local[first:first + 4]}, "
                 f"remote {tokens[first:first + 4]}")
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
