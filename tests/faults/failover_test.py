#!/usr/bin/env python3
"""--rpc-failover on real processes: a server killed mid-generation, generation goes on.

  failover_test.py --tg-run PATH --rpc-server PATH --model MODEL --case layer|tensor|off|last

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
Servers run on loopback (tests/rpc/rpc_cluster.py); no namespaces needed.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import os
import re
import sys
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


def main():
    a = model_test_args([("--case", dict(choices=["layer", "tensor", "off", "last"],
                                          required=True))])
    if model_missing(a.model):
        return SKIP
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
