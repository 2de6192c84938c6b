#!/usr/bin/env python3
"""Runs tg-run twice, on a base device set and on a test device set, and compares.

  compare_devices.py --tg-run PATH --model MODEL --base "ARGS" --test "ARGS"
                     [--require DEV ...] [--n 32] [--top 5] [--tol 1e-3 | --tokens-only]
                     [--kv-type f32] [--prompt TEXT] [--label TEXT]
                     [--rpc-server PATH --serve "ARGS"] [--expect-device REGEX]

Both runs decode greedily with --json. Passes when the greedy tokens are identical and (unless
--tokens-only) every top-K logit of the test run is within --tol of the base run's (an id in
only one of the two top-K lists passes only as a near-tie: within --tol of the K-th). With
--rpc-server, a server is started on loopback with --serve's arguments first, and "{rpc}" in
--test is replaced by its host:port. With --expect-device, `tg-run --list-devices` with --test's
arguments must list a device line matching REGEX (e.g. that the server serves a GPU). Prints
one summary line. Exit 0 pass, 1 mismatch or
error, 77 skipped (a --require'd device or the model missing). Python standard library only:
it runs on GPU machines that have nothing else.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time


def listed_devices(tg_run):
    p = subprocess.run([tg_run, "--list-devices"], capture_output=True, text=True)
    return [line.split()[0] for line in p.stdout.splitlines()[1:] if line.strip()], p.stderr.strip()


def run(tg_run, a, extra):
    cmd = [tg_run, "-m", a.model, "-n", str(a.n), "--temp", "0", "--json", "--top-logits",
           str(a.top), "--kv-type", a.kv_type, "-p", a.prompt] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = p.stderr.strip().splitlines()[-1:] or [""]
        return None, f"{' '.join(shlex.quote(c) for c in cmd)} exited {p.returncode}: {tail[0]}"
    return json.loads(p.stdout), ""


def start_server(path, args):
    port_file = tempfile.mktemp(prefix="tg_gpu_port_")
    log = open(port_file + ".log", "w")
    proc = subprocess.Popen([path] + args + ["--port", "0", "--port-file", port_file],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        if os.path.exists(port_file):
            with open(port_file) as f:
                text = f.read().strip()
            if text:
                return proc, f"127.0.0.1:{text}"
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    with open(port_file + ".log") as f:
        return None, f.read().strip().splitlines()[-1:] or ["no output"]


def compare(base, test, a):
    worst = 0.0
    problems = []
    base_top = {int(i): v for i, v in base["top_logits"]}
    kth = min(base_top.values(), default=0.0)
    for i, v in test["top_logits"]:
        if int(i) not in base_top:
            # Only a near-tie at the boundary (within --tol of the base's K-th logit) may
            # trade places with the base's last one.
            if v > kth + a.tol:
                problems.append(f"id {i} in the test run's top-{a.top} but not in the base "
                                f"run's (logit {v:.6f}, the base's {a.top}th {kth:.6f})")
            continue
        worst = max(worst, abs(v - base_top[int(i)]))
    if not a.tokens_only and worst > a.tol:
        problems.append(f"top-{a.top} logits differ by {worst:.2e} > {a.tol:.0e}")
    if base["tokens"] != test["tokens"]:
        pairs = zip(base["tokens"] + [None], test["tokens"] + [None])
        first = next(i for i, (x, y) in enumerate(pairs) if x != y)
        problems.append(f"greedy tokens differ at {first}: base {base['tokens'][first:first + 4]}"
                        f" test {test['tokens'][first:first + 4]}")
    return worst, problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--require", action="append", default=[])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--tokens-only", action="store_true")
    ap.add_argument("--kv-type", default="f32")
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--label", default="")
    ap.add_argument("--rpc-server")
    ap.add_argument("--serve", default="")
    ap.add_argument("--expect-device")
    a = ap.parse_args()
    label = a.label or f"{os.path.basename(a.model)} {a.test}"
    if not os.path.exists(a.model):
        print(f"SKIP {label}: model {a.model} not found")
        return 77
    names, err = listed_devices(a.tg_run)
    missing = [d for d in a.require if d not in names]
    if missing:
        why = err.splitlines()[-1] if err else f"devices: {', '.join(names)}"
        print(f"SKIP {label}: no {', '.join(missing)} ({why})")
        return 77
    server = None
    test_args = a.test
    try:
        if a.rpc_server:
            server, endpoint = start_server(a.rpc_server, shlex.split(a.serve))
            if server is None:
                print(f"FAIL {label}: rpc-server did not start: {endpoint[0]}")
                return 1
            test_args = test_args.replace("{rpc}", endpoint)
        if a.expect_device:
            p = subprocess.run([a.tg_run, "--list-devices"] + shlex.split(test_args),
                               capture_output=True, text=True)
            if not re.search(a.expect_device, p.stdout):
                print(f"FAIL {label}: no device matching {a.expect_device!r} in: "
                      f"{' | '.join(l.strip() for l in p.stdout.splitlines()[1:])}")
                return 1
        base, why = run(a.tg_run, a, shlex.split(a.base))
        if base is None:
            print(f"FAIL {label}: base run: {why}")
            return 1
        test, why = run(a.tg_run, a, shlex.split(test_args))
        if test is None:
            print(f"FAIL {label}: test run: {why}")
            return 1
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    worst, problems = compare(base, test, a)
    verdict = "FAIL" if problems else "PASS"
    detail = "; ".join(problems) if problems else (
        f"{len(test['tokens'])} greedy tokens identical, top-{a.top} logits within {worst:.1e}")
    print(f"{verdict} {label}: {detail}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
