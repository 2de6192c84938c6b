#!/usr/bin/env python3
"""--rpc-failover on real processes: a server killed mid-generation, generation goes on.

  failover_test.py --tg-run PATH --rpc-server PATH --model MODEL --case layer|tensor|off|last
                   [--tg-bench PATH --case bench|bench-off]

  layer   -sm layer over 3 rpc-servers (one device each), --rpc-failover; server 1 (the
          middle layers) is killed with -9 once 20 tokens are out. The greedy text equals a
          local -sm none run's, and stderr has one line naming the lost server, the
          recovery time and the devices it now runs on (the two left).
  tensor  -sm tensor over 2 rpc-servers x 2 devices, --rpc-failover; server 1 killed the
          same way: the text is right, the work now on server 0's two devices.
  off     the layer case without --rpc-failover: tg-run exits non-zero within 5 s, its
          last line naming the killed server (what it did before failover existed).
  last    one rpc-server, --rpc-failover, killed: no device is left, so tg-run exits
          non-zero within 5 s saying so and naming the server.
  bench   tg-bench -sm layer over 3 rpc-servers, --rpc-failover, pp and tg rows of many
          repetitions; server 1 killed once it has computed some graphs. tg-bench exits 0,
          prints one line naming the lost server, where in the run it was lost and the
          devices left, and every row has all its repetitions: the row that lost it says so
          (failovers 1) and ran on the two servers left, the rows after it too.
  bench-off the bench case without --rpc-failover: a non-zero exit within 5 s naming it.
  deterministic  -sm layer over 3 rpc-servers, --deterministic --rpc-failover, 1500 greedy
          tokens, once uninterrupted and once with server 1 killed after it computed 247
          steps: the second run's tokens equal the first's, on the model given and on a
          synthetic Q8_0 model (--tg-gguf writes it).
Servers run on loopback (tests/rpc/rpc_cluster.py); no namespaces needed.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faultnet import Generation, local_tokens, tg_run_cmd  # noqa: E402
from rpc_cluster import SKIP, Cluster, model_missing, model_test_args  # noqa: E402

PROMPT = "Once upon a time"
N_TOKENS = 200     # enough that the kill lands mid-generation on a fast loopback.
KILL_AFTER = 20    # tokens out before the kill.
DETECT_S = 5.0     # the bound for noticing a dead server without failover.
RECOVERY_RE = re.compile(r"rpc-server (\S+) lost at token (\d+) \((.*)\); recovered in "
                         r"([0-9.]+) s, now on (.*)")
BENCH_RE = re.compile(r"^tg-bench: rpc-server (\S+) lost in (\S+) (warm-up|repetition \d+) "
                      r"\((.*)\); recovered in ([0-9.]+) s, now on (.*)$", re.M)
BENCH_REPS = 60    # repetitions per row: the kill lands early in the first (pp) row.
BENCH_GEN = 4      # tokens of the tg row, which runs all its repetitions after the kill.
BENCH_KILL_GRAPHS = 40  # graphs server 1 computes before the kill (4 per pp repetition).


def metric(c, i, name):
    try:
        return c.metrics(i).get(name, 0)
    except OSError:
        return 0


def bench(a):
    """The bench and bench-off cases (module docstring)."""
    failover = a.case == "bench"
    ok = True
    with Cluster(a.rpc_server, n=3, devices=1) as c:
        devs = sum((c.remote_devices(i) for i in range(3)), [])
        cmd = [a.tg_bench, "-m", a.model, "-p", "32", "-n", str(BENCH_GEN), "-r", str(BENCH_REPS), "-o",
               "json", "-t", "1", "-sm", "layer", "--rpc", ",".join(c.endpoints), "--device",
               ",".join(devs)] + (["--rpc-failover"] if failover else [])
        g = Generation(cmd)
        deadline = time.time() + 120
        while metric(c, 1, "tg_compute_total") < BENCH_KILL_GRAPHS and g.proc.poll() is None:
            if time.time() > deadline:
                break
            time.sleep(0.02)
        if g.proc.poll() is not None:
            g.finish(5)
            print(f"FAIL: tg-bench ended before the kill: {g.stderr[-1500:]}")
            return 1
        t_kill = time.time()
        c.kill(1)
        rc, _ = g.finish(240)
        took = g.end - t_kill
        print(f"RESULT {a.case}: killed {c.endpoints[1]} after {BENCH_KILL_GRAPHS}+ graphs on it; "
              f"tg-bench exit {rc} {took:.2f} s later")
        if not failover:
            line = g.error_line()
            print(f"RESULT {a.case}: {line!r}")
            if rc == 0 or rc is None or took > DETECT_S or c.endpoints[1] not in line:
                print(f"FAIL: want a non-zero exit within {DETECT_S} s naming {c.endpoints[1]}")
                ok = False
            return 0 if ok else 1
        lines = BENCH_RE.findall(g.stderr)
        for m in lines:
            print(f"RESULT bench: lost {m[0]} in {m[1]} {m[2]} ({m[3][:120]}), recovered in "
                  f"{m[4]} s, now on {m[5]}")
        if rc != 0:
            print(f"FAIL: tg-bench failed: {g.error_line()}")
            return 1
        if len(lines) != 1 or lines[0][0] != c.endpoints[1]:
            print(f"FAIL: want one recovery line naming {c.endpoints[1]}: {g.stderr[-2000:]}")
            return 1
        left = [c.endpoints[0], c.endpoints[2]]
        if c.endpoints[1] in lines[0][5] or not all(e in lines[0][5] for e in left):
            print("FAIL: the recovery line should name the two servers left")
            ok = False
        rows = json.loads(g.stdout)
        names = [("pp" if r["n_gen"] == 0 else "tg") + str(r["n_prompt"] or r["n_gen"])
                 for r in rows]
        if names != ["pp32", f"tg{BENCH_GEN}"]:
            print(f"FAIL: want rows pp32 and tg{BENCH_GEN}, got {names}")
            return 1
        hit = names.index(lines[0][1])
        for i, r in enumerate(rows):
            print(f"RESULT bench: {names[i]} {r['avg_ts']:.1f} t/s over {len(r['samples_ns'])} "
                  f"repetitions on {r['devices']} (-sm {r['split_mode']}), failovers "
                  f"{r['failovers']}")
            if len(r["samples_ns"]) != BENCH_REPS or not all(t > 0 for t in r["samples_ts"]):
                print(f"FAIL: {names[i]} should have {BENCH_REPS} timed repetitions")
                ok = False
            if r["failovers"] != (1 if i == hit else 0):
                print(f"FAIL: {names[i]} failovers {r['failovers']}, want {int(i == hit)}")
                ok = False
            if i >= hit and (c.endpoints[1] in r["devices"]
                             or not all(e in r["devices"] for e in left)):
                print(f"FAIL: {names[i]} ran after the loss: want it on {left}")
                ok = False
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


DET_TOKENS = 1500   # the generation length.
DET_KILL_STEPS = 247  # steps server 1 computes before the kill.


def deterministic_run(a, model, kill):
    """tg-run's tokens over 3 fresh servers, server 1 killed after DET_KILL_STEPS of its
    steps when `kill`; with the recovery lines of its stderr."""
    with Cluster(a.rpc_server, n=3, devices=1) as c:
        devs = sum((c.remote_devices(i) for i in range(3)), [])
        extra = ["-p", PROMPT, "-sm", "layer", "--rpc", ",".join(c.endpoints), "--device",
                 ",".join(devs), "-c", "2048", "--deterministic", "--rpc-failover"]
        g = Generation(tg_run_cmd(a.tg_run, model, DET_TOKENS, extra))
        deadline = time.time() + 120
        while kill and g.proc.poll() is None and time.time() < deadline:
            if metric(c, 1, "tg_compute_total") >= DET_KILL_STEPS:
                c.kill(1)
                break
            time.sleep(0.002)
        rc, _ = g.finish(240)
        if rc != 0:
            raise RuntimeError(f"tg-run failed: {g.error_line()}")
        return json.loads(g.stdout)["tokens"], [m for m in map(RECOVERY_RE.search,
                                                                g.stderr.splitlines()) if m]


def deterministic(a):
    """The deterministic case (module docstring)."""
    ok = True
    with tempfile.TemporaryDirectory(prefix="tg-det-") as tmp:
        synth = os.path.join(tmp, "q8.gguf")
        subprocess.run([a.tg_gguf, "synth", synth, "--dims", "256,768,6,8,4,4000", "--type",
                        "q8_0", "--threads", "1"], check=True, capture_output=True)
        for model in (a.model, synth):
            name = os.path.basename(model)
            want, _ = deterministic_run(a, model, kill=False)
            got, lines = deterministic_run(a, model, kill=True)
            if len(lines) != 1 or not 0 < int(lines[0].group(2)) < DET_TOKENS:
                print(f"FAIL {name}: want one recovery mid-generation, got {len(lines)}")
                ok = False
                continue
            at = int(lines[0].group(2))
            diff = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)
            if len(got) != DET_TOKENS or len(want) != DET_TOKENS or diff is not None:
                print(f"FAIL {name}: lost at token {at}; the tokens part from the uninterrupted "
                      f"run's at {diff} ({len(got)} and {len(want)} tokens)")
                ok = False
            else:
                print(f"RESULT deterministic {name}: server lost at token {at}, recovered in "
                      f"{lines[0].group(4)} s; all {DET_TOKENS} tokens equal the uninterrupted run's")
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


def main():
    a = model_test_args([("--case", dict(choices=["layer", "tensor", "off", "last", "bench",
                                                   "bench-off", "deterministic"], required=True)),
                         ("--tg-bench", dict(default=None)), ("--tg-gguf", dict(default=None))])
    if model_missing(a.model):
        return SKIP
    if a.case.startswith("bench"):
        return bench(a)
    if a.case == "deterministic":
        return deterministic(a)
    ctx = ["-c", "512"]
    _, want_text = local_tokens(a.tg_run, a.model, N_TOKENS, ["-p", PROMPT] + ctx)
    _, head = local_tokens(a.tg_run, a.model, KILL_AFTER, ["-p", PROMPT] + ctx)
    n, devices = {"layer": (3, 1), "off": (3, 1), "tensor": (2, 2), "last": (1, 1)}[a.case]
    victim = n - 1 if a.case == "last" else 1
    mode = "tensor" if a.case == "tensor" else "layer"
    ok = True
    with Cluster(a.rpc_server, n=n, devices=devices) as c:
        devs = sum((c.remote_devices(i) for i in range(n)), [])
        extra = ["-p", PROMPT, "-sm", mode, "--rpc", ",".join(c.endpoints), "--device",
                 ",".join(devs)] + ctx + ([] if a.case == "off" else ["--rpc-failover"])
        g = Generation(tg_run_cmd(a.tg_run, a.model, N_TOKENS, extra, json_out=False))
        if not g.wait_output(len(PROMPT) + len(head), 120):
            g.finish(5)
            print(f"FAIL: generation did not start: {g.error_line()}")
            return 1
        t_kill = time.time()
        c.kill(victim)
        rc, _ = g.finish(120)
        took = g.end - t_kill
        print(f"RESULT {a.case}: killed {c.endpoints[victim]} after {KILL_AFTER}+ tokens; tg-run "
              f"exit {rc} {took:.2f} s later")
        if a.case in ("off", "last"):
            line = g.error_line()
            print(f"RESULT {a.case}: {line!r}")
            if rc == 0 or rc is None or took > DETECT_S or c.endpoints[victim] not in line:
                print(f"FAIL: want a non-zero exit within {DETECT_S} s naming {c.endpoints[victim]}")
                ok = False
            if a.case == "last" and "no other device is left" not in line:
                print("FAIL: the error should say that no device is left")
                ok = False
        else:
            lines = [m for m in map(RECOVERY_RE.search, g.stderr.splitlines()) if m]
            for m in lines:
                print(f"RESULT {a.case}: lost {m.group(1)} at token {m.group(2)} "
                      f"({m.group(3)[:160]}), recovered in {m.group(4)} s, now on {m.group(5)}")
            if rc != 0:
                print(f"FAIL: tg-run failed: {g.error_line()}")
                ok = False
            if len(lines) != 1 or lines[0].group(1) != c.endpoints[1]:
                print(f"FAIL: want one recovery line naming {c.endpoints[1]}: {g.stderr[-2000:]}")
                ok = False
            elif not 0 < int(lines[0].group(2)) < N_TOKENS:
                print("FAIL: the kill did not land mid-generation")
                ok = False
            elif c.endpoints[1] in lines[0].group(5) or c.endpoints[0] not in lines[0].group(5):
                print("FAIL: the recovery line should name the devices left")
                ok = False
            got = g.stdout
            if got != PROMPT + want_text:
                diff = next((i for i, (x, y) in enumerate(zip(got, PROMPT + want_text)) if x != y),
                            min(len(got), len(PROMPT + want_text)))
                print(f"FAIL: the text differs from local -sm none's at char {diff}: "
                      f"{got[diff - 20:diff + 40]!r} vs {(PROMPT + want_text)[diff - 20:diff + 40]!r}")
                ok = False
            else:
                print(f"RESULT {a.case}: the {N_TOKENS} greedy tokens' text equals local -sm none's")
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
