#!/usr/bin/env python3
"""Servers load at the same time: two rpc-servers take a model about as long as one takes its
share.

  rpc_parallel_load_test.py --tg-run PATH --rpc-server PATH --tg-gguf PATH --model UNUSED

Each server sits behind a proxy that passes RATE MB/s (tests/rpc/rate_limited_proxy.py: a
link of that speed, since on loopback the wire is not the limit). The model (the 15M shape,
Q8_0, 26 MB, written with tg-gguf synth) is split by layers in two equal halves:
  one server: RPC[A] + the local CPU, so A gets the first half;
  two servers: RPC[A] + RPC[B], each gets a half (A exactly the same bytes as above).
The weights' load time (tg-run's load report) with two servers must stay below 1.3x that
with one; servers loaded one after the other would take 2x. Medians of ROUNDS interleaved
rounds; the tokens must equal local -sm none's.
Exit 0 pass, 1 fail.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rate_limited_proxy import RateLimitedProxy  # noqa: E402
from rpc_cluster import Cluster, local_env, model_test_args  # noqa: E402

RATE_MB_S = 10  # slow enough that the link, not this machine's CPUs, sets the time.
ROUNDS = 3
LIMIT = 1.3


def main():
    a = model_test_args([("--tg-gguf", dict(required=True))])
    env = local_env()
    with tempfile.TemporaryDirectory(prefix="tg-parallel-") as d:
        model = os.path.join(d, "m.gguf")
        r = subprocess.run([a.tg_gguf, "synth", model, "--dims", "288,768,6,6,6,32000", "--type",
                            "q8_0"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: tg-gguf synth: {r.stderr}")
            return 1
        common = [a.tg_run, "-m", model, "-n", "8", "--temp", "0", "--json", "-t", "1"]
        want = json.loads(subprocess.run(common, capture_output=True, text=True, env=env).stdout)
        ok = True
        with Cluster(a.rpc_server, n=2, devices=1) as c, \
                RateLimitedProxy(c.endpoints[0], RATE_MB_S) as pa, \
                RateLimitedProxy(c.endpoints[1], RATE_MB_S) as pb:
            runs = {
                "one server": ["--rpc", pa.endpoint, "-sm", "layer", "-ts", "1,1",
                               "--device", f"RPC[{pa.endpoint}]/0,CPU"],
                "two servers": ["--rpc", f"{pa.endpoint},{pb.endpoint}", "-sm", "layer", "-ts",
                                "1,1", "--device", f"RPC[{pa.endpoint}]/0,RPC[{pb.endpoint}]/0"],
            }
            seconds = {k: [] for k in runs}
            for rnd in range(ROUNDS):
                for name, extra in runs.items():
                    r = subprocess.run(common + extra, capture_output=True, text=True, env=env)
                    if r.returncode != 0:
                        print(f"FAIL: {name}: {r.stderr[-1500:]}")
                        return 1
                    out = json.loads(r.stdout)
                    if out["tokens"] != want["tokens"]:
                        print(f"FAIL: {name}: tokens differ from local -sm none")
                        ok = False
                    devices = {dev["device"]: dev for dev in out["load"]["devices"]}
                    remote = [dev for dev in devices.values() if dev["device"].startswith("RPC")]
                    seconds[name].append(out["load"]["seconds"])
                    print(f"round {rnd + 1}, {name}: weights in {out['load']['seconds']:.2f} s; " +
                          ", ".join(f"{dev['device']} {dev['bytes'] / 1e6:.1f} MB in "
                                    f"{dev['seconds']:.2f} s" for dev in remote))
        one, two = statistics.median(seconds["one server"]), statistics.median(seconds["two servers"])
        print(f"median: one server {one:.2f} s, two servers {two:.2f} s: {two / one:.2f}x "
              f"(limit {LIMIT}x; one after the other would be about 2x)")
        if two > LIMIT * one:
            print("FAIL: the two servers did not load at the same time")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
