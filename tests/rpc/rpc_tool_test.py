#!/usr/bin/env python3
"""Runs a tool against fresh rpc-servers: `{endpoints}` in its arguments becomes their list,
`{devices}` the list of their devices (RPC[host:port]/N,...).

  rpc_tool_test.py --rpc-server PATH [--servers 1] -- TOOL ARGS... --rpc {endpoints}

Passes when the tool exits 0 (its output is shown).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import Cluster  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rpc-server", required=True)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("tool", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    tool = [x for x in a.tool if x != "--"]
    env = {k: v for k, v in os.environ.items() if k != "TG_CPU_DEVICES"}
    with Cluster(a.rpc_server, n=a.servers, devices=2) as c:
        devices = ",".join(sum((c.remote_devices(i) for i in range(a.servers)), []))
        cmd = [x.replace("{endpoints}", ",".join(c.endpoints)).replace("{devices}", devices)
               for x in tool]
        r = subprocess.run(cmd, env=env)
        if r.returncode != 0:
            for s in c.servers:
                print(f"--- {s.endpoint} log:\n{s.read_log()}")
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())
