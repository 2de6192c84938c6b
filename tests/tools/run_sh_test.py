#!/usr/bin/env python3
"""The README's main job: `bash scripts/run.sh` with no arguments.

  run_sh_test.py --repo DIR

Runs scripts/run.sh (TG_SKIP_APT=1: the packages are there; the programs are built, so its
build step has nothing to do) and checks that it prints stories260K's greedy continuation,
that the model was loaded on the devices of two rpc-servers (the -v load report: two
endpoints, two devices each, nothing on the client's CPU), and that no server process is
left behind. Exit 0 pass, 1 fail.
"""
import argparse
import os
import re
import subprocess
import sys
import time

# llama.cpp's greedy continuation of "Once upon a time" on stories260K (../shared/models).
EXPECTED = "Once upon a time, there was a little girl named Lily."


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited: only its parent's wait is missing.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    env = dict(os.environ, TG_SKIP_APT="1")
    env.pop("TG_CPU_DEVICES", None)
    start = time.time()
    p = subprocess.run(["bash", "scripts/run.sh"], cwd=a.repo, env=env, capture_output=True,
                       text=True, timeout=600)
    out = p.stdout + p.stderr
    print(f"run.sh exited {p.returncode} in {time.time() - start:.1f} s")
    failures = []
    if p.returncode != 0:
        failures.append(f"run.sh exited {p.returncode}")
    if EXPECTED not in p.stdout:
        failures.append(f"stdout lacks {EXPECTED!r}")
    loads = re.findall(r"^tg-run: load (\S+): ", out, re.M)
    endpoints = {re.match(r"RPC\[([^\]]+)\]/\d+$", d).group(1) for d in loads
                 if d.startswith("RPC[")}
    print(f"load report: {loads}")
    if len(endpoints) != 2 or len(loads) != 4:
        failures.append(f"expected 4 devices on 2 servers in the load report, got {loads}")
    pids = re.search(r"two rpc-servers \(pids (\d+) (\d+)\)", out)
    if pids is None:
        failures.append("run.sh did not name its servers' pids")
    else:
        left = [int(pid) for pid in pids.groups() if alive(int(pid))]
        if left:
            failures.append(f"rpc-server processes {left} are still running")
            for pid in left:
                os.kill(pid, 9)
    for f in failures:
        print(f"FAIL: {f}")
    if failures:
        print(out[-4000:])
        return 1
    print("PASS: the demo split stories260K over two rpc-servers and stopped them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
