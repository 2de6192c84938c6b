#!/usr/bin/env python3
"""-sm tensor against -sm layer over rpc-servers on hosts apart: SERVERS one-thread rpc-servers,
each in its own network namespace (the fault harness, tests/faults/faultnet.py) with DELAY_MS
added on its link by netem (so a message between two servers crosses two delayed links), and
tg-bench tg128 from the root namespace with 2 threads, in ROUNDS interleaved rounds. Where the
kernel has no sch_netem the harness delays through delayq.py, a Python process every packet
crosses, which takes CPU from the servers on a small host: the header line says which ran.

  sudo python3 scripts/bench_rpc_netns.py MODEL [--servers 3] [--delay-ms 1] [--rounds 3]
                                         [--reps 2] [--plain]

By default the servers run as the harness starts them (TLS and a token: peer links are off,
all-reduce pieces take the gRPC stream); --plain starts them without TLS (--insecure), where
they link to each other for small all-reduce pieces (docs/rpc.md, "Peer links").
"""
import argparse
import csv
import io
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "faults"))
import faultnet  # noqa: E402


class PlainNet(faultnet.Net):
    """The harness's servers without TLS or a token, on the same namespaces."""

    def server_flags(self, i):
        flags = ["--insecure", "--peers", f"{faultnet.SUBNET}.{self.k}.0/24"]
        return flags + self.extra

    @property
    def client_flags(self):
        return []


def tg128(bench, model, net, split, reps):
    cmd = [bench, "-m", model, "-t", "2", "-p", "0", "-n", "128", "-r", str(reps), "-o", "csv",
           "--rpc", ",".join(net.endpoints), "-sm", split] + list(net.client_flags)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    row = list(csv.DictReader(io.StringIO(out)))[-1]
    return float(row["avg_ts"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--plain", action="store_true")
    a = ap.parse_args()
    why = faultnet.unavailable()
    if why:
        sys.exit(f"network namespaces unavailable: {why}")
    build = os.path.join(ROOT, "build", "release")
    server = os.path.join(build, "server", "rpc-server")
    bench = os.path.join(build, "tools", "tg-bench", "tg-bench")
    cls = PlainNet if a.plain else faultnet.Net
    with cls(server, n=a.servers, devices=1, threads=1) as net:
        # No delay: no link fault at all (without the kernel's netem the harness delays
        # through delayq.py, a Python process that every packet crosses, on these cores).
        how = "none"
        if a.delay_ms > 0:
            for i in range(a.servers):
                net.link(i).netem(delay_ms=a.delay_ms)
            how = "netem" if net.netem_ok else "delayq.py (userspace NFQUEUE: no sch_netem here)"
        print(f"## {a.servers} servers, {a.delay_ms} ms on each link by {how}, "
              f"{'plain (peer links)' if a.plain else 'TLS (streams)'}; tg128 t/s")
        for r in range(1, a.rounds + 1):
            tensor = tg128(bench, a.model, net, "tensor", a.reps)
            layer = tg128(bench, a.model, net, "layer", a.reps)
            print(f"round {r}: tensor {tensor:.2f} layer {layer:.2f} tensor/layer "
                  f"{tensor / layer:.2f}x", flush=True)


if __name__ == "__main__":
    main()
